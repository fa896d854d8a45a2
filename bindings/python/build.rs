//! Puts the WASI guest into the Python package (`script_harness/bin/quickjs.wasm`),
//! building it first with `scripts/build-quickjs-wasm` when the checkout has
//! none, so that `pip install ./bindings/python` ships the sandbox's engine.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    // Read when the script runs, not baked in when it was compiled: a
    // target directory reused by another checkout then still finds its own.
    let here = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let here = here.as_path();
    let root = here.join("../..");
    let guest = root.join("bin/quickjs.wasm");
    let script = root.join("scripts/build-quickjs-wasm");
    println!("cargo:rerun-if-changed={}", guest.display());
    println!("cargo:rerun-if-env-changed=SCRIPT_HARNESS_NO_GUEST");
    if std::env::var_os("SCRIPT_HARNESS_NO_GUEST").is_some() {
        println!("cargo:warning=SCRIPT_HARNESS_NO_GUEST is set: the package will not contain the sandbox's guest");
        return;
    }
    if !guest.exists() {
        println!("cargo:warning=bin/quickjs.wasm is missing: building it with scripts/build-quickjs-wasm");
        let ok = Command::new(&script)
            .current_dir(&root)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok || !guest.exists() {
            panic!(
                "the WASI guest bin/quickjs.wasm could not be built: {} needs rustup (the wasm32-wasip1 target) \
                 and Debian's clang-19, lld-19, wasi-libc and libclang-rt-19-dev-wasm32 (it installs them with \
                 apt-get when it may). Build it by hand and retry, or set SCRIPT_HARNESS_NO_GUEST=1 to build the \
                 package without the sandbox.",
                script.display()
            );
        }
    }
    let dest = here.join("python/script_harness/bin");
    let copy = std::fs::create_dir_all(&dest)
        .and_then(|()| std::fs::copy(&guest, dest.join("quickjs.wasm")));
    if let Err(e) = copy {
        panic!(
            "could not copy {} into {}: {e}",
            guest.display(),
            dest.display()
        );
    }
}
