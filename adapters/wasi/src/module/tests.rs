use super::exports_func;

/// A module with one function `() -> ()` exported as `f`, by hand.
const EXPORTS_F: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
    0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type section: () -> ()
    0x03, 0x02, 0x01, 0x00, // function section: one of type 0
    0x07, 0x05, 0x01, 0x01, b'f', 0x00, 0x00, // export "f" = func 0
    0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // code: an empty body
];

/// Whether the program snapshot can be taken is read from the guest's
/// exports; an older guest (or bytes that are no module) is run as a
/// plain program instead.
#[test]
fn exports_are_read_from_the_module() {
    assert!(exports_func(EXPORTS_F, "f"));
    assert!(!exports_func(EXPORTS_F, "wizer_initialize_program"));
    assert!(!exports_func(b"\0asm\x01\0\0\0", "f"));
    assert!(!exports_func(b"not wasm at all", "f"));
}

/// Writing a compiled module removes what a process left behind: files
/// of another guest, and a write abandoned an hour ago (the process
/// ended while it wrote). A write in progress now is left alone.
#[test]
fn writing_the_cache_removes_stale_and_abandoned_files() {
    use std::time::{Duration, SystemTime};
    let dir = tempfile::tempdir().unwrap();
    let sha = "0123456789abcdef0123456789abcdef";
    let file = |name: &str| dir.path().join(name);
    let keep = ".quickjs-0123456789abcdef-wasmtime48-reserved-preinit.cwasm";
    let other_guest = ".quickjs-fedcba9876543210-wasmtime48-reserved-preinit.cwasm";
    let abandoned = ".quickjs-0123456789abcdef-wasmtime48-reserved-private.tmp41";
    let writing = ".quickjs-0123456789abcdef-wasmtime48-bounded-private.tmp42";
    for name in [other_guest, abandoned, writing, "unrelated.tmp1"] {
        std::fs::write(file(name), b"x").unwrap();
    }
    let hours_ago = SystemTime::now() - Duration::from_secs(2 * 3600);
    for name in [abandoned, "unrelated.tmp1"] {
        let f = std::fs::File::options()
            .write(true)
            .open(file(name))
            .unwrap();
        f.set_modified(hours_ago).unwrap();
    }
    let engine = wasmtime::Engine::default();
    let module = wasmtime::Module::new(&engine, EXPORTS_F).unwrap();
    super::write_cached(&module, &file(keep), sha);
    assert!(file(keep).is_file());
    assert!(!file(other_guest).exists());
    assert!(!file(abandoned).exists());
    assert!(file(writing).exists());
    assert!(file("unrelated.tmp1").exists());
}
