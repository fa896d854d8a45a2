//! The coding pack on a fixture tree: nested directories, a `.gitignore`,
//! a symlink out of the root and a binary file.

use harness::{AutoApprove, Harness};
use serde_json::{json, Value};
use std::sync::Arc;

fn fixture() -> (tempfile::TempDir, tempfile::TempDir) {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "needle outside\n").unwrap();
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    std::fs::create_dir_all(r.join("src/deep/er")).unwrap();
    std::fs::create_dir_all(r.join("target")).unwrap();
    std::fs::write(r.join(".gitignore"), "target/\n*.log\n").unwrap();
    std::fs::write(
        r.join("src/main.rs"),
        "fn main() {\n    let x = 1;\n    if x > 0 {\n        println!(\"needle\");\n    }\n}\n",
    )
    .unwrap();
    std::fs::write(r.join("src/deep/er/mod.rs"), "// needle here too\n").unwrap();
    std::fs::write(r.join("target/built.rs"), "needle in ignored\n").unwrap();
    std::fs::write(r.join("debug.log"), "needle in log\n").unwrap();
    std::fs::write(r.join("blob.bin"), b"needle\0\x01\x02binary").unwrap();
    std::os::unix::fs::symlink(outside.path(), r.join("escape")).unwrap();
    // A 2x1 PNG, and a file that only starts like one.
    let mut png = Vec::new();
    image::RgbImage::new(2, 1)
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    std::fs::write(r.join("pic.png"), png).unwrap();
    std::fs::write(r.join("fake.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
    (root, outside)
}

fn harness(root: &std::path::Path) -> Harness {
    let tools = harness::builtin::registry(root).unwrap();
    Harness::builder()
        .tools(tools)
        .approvals(Arc::new(AutoApprove))
        .allow(harness::Allowlist::only([
            "core-codex",
            "anthropic-standard",
            "file-ops",
            "viewImage",
        ]))
        .build()
        .unwrap()
}

async fn value(h: &Harness, src: &str) -> Value {
    let r = h.run(src).await;
    assert!(r.ok, "{src}: {:?}", r.error);
    r.value.unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_respects_gitignore_skips_binaries_and_stays_inside() {
    let (root, _outside) = fixture();
    let h = harness(root.path());
    let v = value(&h, "return await tools.grepFiles({pattern: 'needle'})").await;
    assert_eq!(
        v["files"],
        json!(["src/deep/er/mod.rs", "src/main.rs"]),
        "{v}"
    );
    let v = value(
        &h,
        "return await tools.grepFiles({pattern: 'needle', include: '*.rs', path: 'src/deep'})",
    )
    .await;
    assert_eq!(v["files"], json!(["src/deep/er/mod.rs"]));
    let r = h
        .run("return await tools.grepFiles({pattern: 'needle', path: 'escape'})")
        .await;
    assert_eq!(r.code(), Some(harness::ErrorCode::ToolExecutionError));
    let r = h.run("return await tools.grepFiles({pattern: '('})").await;
    assert!(r.error.unwrap().message.contains("bad pattern"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_slices_and_indentation_blocks() {
    let (root, _outside) = fixture();
    let h = harness(root.path());
    let v = value(
        &h,
        "return await tools.readFile({filePath: 'src/main.rs', offset: 2, limit: 2})",
    )
    .await;
    assert_eq!(v["content"], "L2:     let x = 1;\nL3:     if x > 0 {");
    assert_eq!(v["totalLines"], 6);
    assert_eq!(v["truncated"], true);
    let v = value(&h, "return (await tools.readFile({filePath: 'src/main.rs', mode: 'indentation', anchorLine: 4, maxLevels: 1})).content").await;
    assert_eq!(
        v,
        "L3:     if x > 0 {\nL4:         println!(\"needle\");\nL5:     }"
    );
    for bad in ["blob.bin", "escape/secret.txt", "src", "../x"] {
        let r = h
            .run(&format!(
                "return await tools.readFile({{filePath: '{bad}'}})"
            ))
            .await;
        assert_eq!(
            r.code(),
            Some(harness::ErrorCode::ToolExecutionError),
            "{bad}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_dir_marks_kinds_and_pages() {
    let (root, _outside) = fixture();
    let h = harness(root.path());
    let v = value(&h, "return await tools.listDir({dirPath: '.', depth: 3})").await;
    let entries: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        entries.contains(&"escape@") && entries.contains(&"src/") && entries.contains(&"    er/"),
        "{entries:?}"
    );
    assert!(
        !entries.iter().any(|e| e.contains("secret")),
        "the symlink is not followed"
    );
    let v = value(
        &h,
        "return await tools.listDir({dirPath: '.', depth: 3, offset: 2, limit: 2})",
    )
    .await;
    assert_eq!(v["entries"].as_array().unwrap().len(), 2);
    assert_eq!(v["hasMore"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_search_is_fuzzy_and_ignores_what_git_ignores() {
    let (root, _outside) = fixture();
    let h = harness(root.path());
    let v = value(&h, "return await tools.fileSearch({pattern: 'srcmain'})").await;
    assert_eq!(v["matches"][0]["path"], "src/main.rs", "{v}");
    let v = value(
        &h,
        "return (await tools.fileSearch({pattern: 'built'})).totalMatched",
    )
    .await;
    assert_eq!(v, 0, "target/ is ignored");
    let v = value(&h, "return (await tools.fileSearch({pattern: 'rs', exclude: ['src/deep/**']})).matches.map(m => m.path)").await;
    assert_eq!(v, json!(["src/main.rs"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_patch_is_all_or_nothing_and_plans_and_images_are_checked() {
    let (root, _outside) = fixture();
    let h = harness(root.path());
    let r = h.run("return await tools.applyPatch({patch: '*** Begin Patch\\n*** Add File: new.txt\\n+hi\\n*** Update File: src/main.rs\\n@@\\n-    let y = 2;\\n+    let y = 3;\\n*** End Patch'})").await;
    assert!(r.error.unwrap().message.contains("hunk 1 of src/main.rs"));
    assert!(!root.path().join("new.txt").exists());
    let v = value(&h, "return await tools.applyPatch({patch: '*** Begin Patch\\n*** Update File: src/main.rs\\n@@ fn main() {\\n-    let x = 1;\\n+    let x = 2;\\n*** End Patch'})").await;
    assert_eq!(v["files"][0]["action"], "update");
    assert!(std::fs::read_to_string(root.path().join("src/main.rs"))
        .unwrap()
        .contains("let x = 2;"));
    let r = h.run("return await tools.applyPatch({patch: '*** Begin Patch\\n*** Add File: escape/evil.txt\\n+x\\n*** End Patch'})").await;
    assert!(!r.ok);
    let v = value(&h, "return await tools.updatePlan({plan: [{step: 'a', status: 'completed'}, {step: 'b', status: 'in_progress'}]})").await;
    assert_eq!(v["plan"][1]["status"], "in_progress");
    let r = h.run("return await tools.updatePlan({plan: [{step: 'a', status: 'in_progress'}, {step: 'b', status: 'in_progress'}]})").await;
    assert!(r.error.unwrap().message.contains("at most one"));
    let v = value(&h, "return await tools.viewImage({path: 'pic.png'})").await;
    assert_eq!(
        v,
        json!({"path": "pic.png", "type": "png", "width": 2, "height": 1})
    );
    let r = h
        .run("return await tools.viewImage({path: 'fake.png'})")
        .await;
    assert!(r.error.unwrap().message.contains("not a readable image"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_in_cwd_with_env_caps_output_and_kills_the_group() {
    let (root, _outside) = fixture();
    let h = harness(root.path());
    let v = value(&h, "return await tools.exec({command: ['sh', '-c', 'echo $FOO; pwd; echo e >&2'], cwd: 'src/deep', env: {FOO: 'bar'}})").await;
    assert_eq!(v["exitCode"], 0);
    assert!(
        v["stdout"].as_str().unwrap().starts_with("bar\n")
            && v["stdout"]
                .as_str()
                .unwrap()
                .trim_end()
                .ends_with("src/deep"),
        "{v}"
    );
    assert!(v["aggregatedOutput"].as_str().unwrap().contains("e\n"));
    assert_eq!(v["confined"], landlock_abi() >= 4);
    assert!(v["durationMs"].as_f64().unwrap() >= 0.0);
    let r = h
        .run("return await tools.exec({command: ['pwd'], cwd: 'escape'})")
        .await;
    assert!(r.error.unwrap().message.contains("inside the root"));
    // A grandchild left running is killed with the group; the call ends at once.
    let marker = format!("sleep 30.{:03}", std::process::id() % 1000);
    let v = value(
        &h,
        &format!(
            "return await tools.exec({{command: ['sh', '-c', '({marker} &); echo started']}})"
        ),
    )
    .await;
    assert_eq!(v["stdout"], "started\n", "{v}");
    assert!(v["durationMs"].as_f64().unwrap() < 5000.0, "{v}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let left = std::process::Command::new("pgrep")
        .args(["-f", &marker])
        .output()
        .unwrap();
    assert!(left.stdout.is_empty(), "the group was not killed");
    let v = value(
        &h,
        "return await tools.exec({command: ['sh', '-c', 'sleep 30'], timeoutMs: 200})",
    )
    .await;
    assert_eq!(v["timedOut"], true);
    let v = value(&h, "const r = await tools.exec({command: ['head', '-c', '300000', '/dev/zero']}); return [r.stdout.length, r.stdoutTruncated, r.stdout.endsWith('...<truncated>')]").await;
    assert_eq!(v, json!([262144, true, true]));
}

/// The kernel's Landlock ABI version (0 or less: none).
#[allow(unsafe_code)]
fn landlock_abi() -> i64 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // reads no memory and only returns a number.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    }
}

/// `exec`'s result for `argv` on `h`.
async fn exec_argv(h: &Harness, argv: &[&str]) -> Value {
    value(
        h,
        &format!("return await tools.exec({{command: {}}})", json!(argv)),
    )
    .await
}

fn exec_harness(root: &std::path::Path, policy: harness::builtin::ExecPolicy) -> Harness {
    let tools = harness::builtin::registry_with(root, policy).unwrap();
    Harness::builder()
        .tools(tools)
        .approvals(Arc::new(AutoApprove))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_writes_only_under_the_root_and_has_no_network_where_landlock_is() {
    let (root, outside) = fixture();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "return await tools.exec({{command: ['bash', '-c', \
         'echo in > inside.txt; echo out > {}/x.txt; echo > /dev/tcp/127.0.0.1/{port}; true']}})",
        outside.path().display()
    );
    let policy = harness::builtin::ExecPolicy::default;
    let abi = landlock_abi();
    let v = value(&exec_harness(root.path(), policy()), &script).await;
    if abi < 4 {
        // Visible, not silent: this kernel cannot confine, and exec says so.
        eprintln!("SKIPPED: Landlock ABI {abi} on this kernel (4 needed): exec runs unconfined");
        assert_eq!(v["confined"], false);
        return;
    }
    assert_eq!(v["confined"], true, "{v}");
    assert!(root.path().join("inside.txt").exists(), "{v}");
    assert!(
        !outside.path().join("x.txt").exists(),
        "wrote outside the root: {v}"
    );
    assert!(
        listener.accept().is_err(),
        "connected with the network denied"
    );
    // The policy may allow the network: the connection is made.
    let v = value(
        &exec_harness(root.path(), policy().with_allow_network(true)),
        &script,
    )
    .await;
    assert_eq!(v["confined"], true, "{v}");
    assert!(!outside.path().join("x.txt").exists(), "{v}");
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        listener.accept().is_ok(),
        "no connection with the network allowed: {v}"
    );
    // And confinement off: the child can write anywhere the user can.
    let v = value(
        &exec_harness(root.path(), policy().with_confine(false)),
        &script,
    )
    .await;
    assert_eq!(v["confined"], false, "{v}");
    assert!(outside.path().join("x.txt").exists(), "{v}");
}

/// `exec` is a jail, not a polite request: what the host holds (its
/// environment, its descriptors, a terminal) does not reach the child,
/// and nothing the child starts outlives the call.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(unsafe_code)]
async fn exec_is_a_jail_for_environment_descriptors_terminals_and_descendants() {
    let (root, outside) = fixture();
    let secret = format!("HARNESS_TEST_SECRET_{}", std::process::id());
    // SAFETY: set before any tool runs; no other thread of this test reads it.
    unsafe { std::env::set_var(&secret, "s3cr3t-value") };
    let policy = harness::builtin::ExecPolicy::default()
        .with_env_allow(["PATH", "TERM", secret.as_str()])
        .with_env_withheld([secret.as_str()]);
    let h = exec_harness(root.path(), policy);

    // The environment: the allowed variables the host has, HOME = the
    // root, never a withheld secret.
    let v = exec_argv(&h, &["/usr/bin/env"]).await;
    let out = v["stdout"].as_str().unwrap();
    let names: Vec<&str> = out.lines().filter_map(|l| l.split('=').next()).collect();
    assert!(!out.contains("s3cr3t-value"), "{out}");
    assert!(
        names.iter().all(|n| ["PATH", "TERM", "HOME"].contains(n)),
        "{out}"
    );
    let home = format!("HOME={}", root.path().canonicalize().unwrap().display());
    assert!(out.lines().any(|l| l == home), "{out}");

    // A descriptor the host holds without close-on-exec is not inherited.
    let file = outside.path().join("inherited.txt");
    let f = std::fs::File::create(&file).unwrap();
    // SAFETY: dup returns a new descriptor (without close-on-exec) or -1.
    let fd = unsafe { libc::dup(std::os::fd::AsRawFd::as_raw_fd(&f)) };
    assert!(fd > 2);
    let v = exec_argv(&h, &["sh", "-c", &format!("echo PWNED >&{fd}")]).await;
    assert_ne!(v["exitCode"], 0, "{v}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "", "{v}");
    // SAFETY: the descriptor dup made above.
    unsafe { libc::close(fd) };

    // Nothing leaves the process group, so nothing outlives the call.
    assert_eq!(v["groupHeld"], true, "{v}");
    let marker = format!("98{:04}", std::process::id() % 10_000);
    // (`setsid` forks first, as the child leads its group; `-w` waits.)
    let v = exec_argv(&h, &["setsid", "-w", "sleep", &marker]).await;
    assert!(
        v["stderr"].as_str().unwrap().contains("not permitted"),
        "setsid must fail: {v}"
    );
    exec_argv(&h, &["setsid", "-f", "sleep", &marker]).await;
    let v = exec_argv(&h, &[
        "/usr/bin/python3",
        "-c",
        &format!("import os, subprocess\nif os.fork() == 0:\n    subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n    os._exit(0)\nos.wait()"),
    ])
    .await;
    assert!(v["durationMs"].as_f64().unwrap() < 5000.0, "{v}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let left = std::process::Command::new("pgrep")
        .args(["-f", &format!("sleep {marker}")])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "a descendant outlived the call: {v}"
    );

    // No terminal: none is controlling, and no ioctl types into one the
    // host holds (TIOCSTI on the slave of a pty this test opened).
    let v = exec_argv(&h, &["sh", "-c", "exec 3<>/dev/tty"]).await;
    assert_ne!(v["exitCode"], 0, "{v}");
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors; the name and settings are unused.
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(opened, 0);
    let tty = std::fs::read_link(format!("/proc/self/fd/{slave}")).unwrap();
    let inject = format!(
        "import fcntl, os, termios\nfd = os.open('{}', os.O_RDONLY)\nfor c in b'echo INJECTED\\n':\n    fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))",
        tty.display()
    );
    let v = exec_argv(&h, &["/usr/bin/python3", "-c", &inject]).await;
    assert_ne!(v["exitCode"], 0, "{v}");
    assert!(
        v["stderr"]
            .as_str()
            .unwrap()
            .contains("Operation not permitted"),
        "{v}"
    );
    // Without Landlock too: the seccomp filter refuses the ioctl.
    let unconfined = exec_harness(
        root.path(),
        harness::builtin::ExecPolicy::default().with_confine(false),
    );
    let v = exec_argv(&unconfined, &["/usr/bin/python3", "-c", &inject]).await;
    assert_eq!(v["confined"], false, "{v}");
    assert!(
        v["stderr"]
            .as_str()
            .unwrap()
            .contains("Operation not permitted"),
        "{v}"
    );
    // SAFETY: slave is the pty opened above (what is typed into a
    // terminal is read from it); O_NONBLOCK makes the read return at once.
    let typed = unsafe {
        libc::fcntl(slave, libc::F_SETFL, libc::O_NONBLOCK);
        let mut buf = [0u8; 64];
        libc::read(slave, buf.as_mut_ptr().cast(), buf.len())
    };
    assert!(typed <= 0, "something was typed into the terminal");
    // SAFETY: the two descriptors openpty made.
    unsafe {
        libc::close(master);
        libc::close(slave);
    }

    // No device nodes and no FIFOs, even under the root and as root.
    let v = exec_argv(
        &h,
        &["sh", "-c", "mknod zero c 1 5 || mkfifo f || exit 0; exit 1"],
    )
    .await;
    assert_eq!(v["exitCode"], 0, "{v}");
    assert!(!root.path().join("zero").exists() && !root.path().join("f").exists());
}

/// Makes a FIFO at `path`.
#[cfg(unix)]
#[allow(unsafe_code)]
fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// A FIFO, a device node or a file that grows cannot hang a file tool or
/// fill memory: what was opened (without blocking) must be a regular file
/// within the cap.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(unsafe_code)]
async fn file_tools_read_regular_files_only() {
    let (root, _outside) = fixture();
    let h = exec_harness(root.path(), harness::builtin::ExecPolicy::default());
    mkfifo(&root.path().join("f"));
    let mut names = vec!["f"];
    let zero = std::ffi::CString::new(root.path().join("zero").to_str().unwrap()).unwrap();
    // SAFETY: mknod reads the NUL-terminated path (a character device 1:5,
    // /dev/zero's; only root may make one).
    if unsafe { libc::mknod(zero.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 5)) } == 0 {
        names.push("zero");
    } else {
        eprintln!("SKIPPED: the device-node half (not root)");
    }
    for name in names {
        for call in [
            format!("tools.read_file({{path: '{name}'}})"),
            format!("tools.readFile({{filePath: '{name}'}})"),
            format!("tools.viewImage({{path: '{name}'}})"),
            format!("tools.applyPatch({{patch: '*** Begin Patch\\n*** Delete File: {name}\\n*** End Patch'}})"),
        ] {
            let started = std::time::Instant::now();
            let r = h.run(&format!("return await {call}")).await;
            let e = r.error.unwrap_or_else(|| panic!("{call} succeeded"));
            assert!(e.message.contains("not a regular file"), "{call}: {}", e.message);
            assert!(started.elapsed() < std::time::Duration::from_secs(5), "{call}");
        }
    }
}

/// grepFiles and fileSearch walk the directory they opened: a start
/// directory swapped for a link out of the root, over and over while they
/// run, never shows them what is outside.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_and_file_search_walk_what_they_opened_however_it_is_swapped() {
    let (root, outside) = fixture();
    let r = root.path().to_path_buf();
    std::fs::create_dir(r.join("real")).unwrap();
    std::fs::write(r.join("real/inside.txt"), "root:inside\n").unwrap();
    std::fs::write(outside.path().join("passwd"), "root:outside\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), r.join("link")).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (r, stop) = (r.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // `d` is the real directory, then the link out, in turn.
                for name in ["real", "link"] {
                    let _ = std::fs::rename(r.join(name), r.join("d"));
                    std::thread::sleep(std::time::Duration::from_micros(300));
                    let _ = std::fs::rename(r.join("d"), r.join(name));
                }
                swaps += 1;
            }
            swaps
        })
    };
    let h = harness(root.path());
    let (mut inside, mut refused) = (0, 0);
    for _ in 0..60 {
        for script in [
            "return await tools.grepFiles({pattern: '^root:', path: 'd'})",
            "return await tools.fileSearch({pattern: 'passwd', searchDirectory: 'd'})",
        ] {
            let r = h.run(script).await;
            let text = serde_json::to_string(&r.value).unwrap();
            assert!(!text.contains("passwd"), "{script}: saw outside: {text}");
            if r.ok {
                inside += 1;
            } else {
                refused += 1;
                let message = r.error.unwrap().message;
                assert!(
                    message.contains("leads outside") || message.contains("no such file"),
                    "{message}"
                );
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 100, "the swapper barely ran ({swaps} swaps)");
    assert!(
        inside > 0 && refused > 0,
        "{inside} inside, {refused} refused"
    );
    eprintln!("{swaps} swaps: {inside} walks inside, {refused} refused");
}

/// A path out of the root gets one answer, whatever lies at its end:
/// nothing tells a file outside from a missing one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_is_one_answer_whatever_exists_there() {
    let (root, _outside) = fixture();
    let h = exec_harness(root.path(), harness::builtin::ExecPolicy::default());
    let up = "../".repeat(40);
    for (present, absent) in [
        (
            "tools.grepFiles({pattern: 'x', path: 'escape/secret.txt'})".to_owned(),
            "tools.grepFiles({pattern: 'x', path: 'escape/no-such'})".to_owned(),
        ),
        (
            format!("tools.fileSearch({{pattern: 'x', searchDirectory: '{up}etc'}})"),
            format!("tools.fileSearch({{pattern: 'x', searchDirectory: '{up}no-such-dir'}})"),
        ),
        (
            "tools.read_file({path: 'escape/secret.txt'})".to_owned(),
            "tools.read_file({path: 'escape/no-such'})".to_owned(),
        ),
        (
            "tools.listDir({dirPath: 'escape/secret.txt'})".to_owned(),
            "tools.listDir({dirPath: 'escape/no-such'})".to_owned(),
        ),
    ] {
        let answer = |r: harness::ExecutionReport| {
            let code = r.code();
            let e = r.error.expect("refused");
            assert!(
                e.message.contains("leads outside the root"),
                "{}",
                e.message
            );
            (
                code,
                e.message
                    .replace("secret.txt", "X")
                    .replace("no-such", "X")
                    .replace("etc", "X")
                    .replace("X-dir", "X"),
            )
        };
        let a = answer(h.run(&format!("return await {present}")).await);
        let b = answer(h.run(&format!("return await {absent}")).await);
        assert_eq!(a, b, "{present} / {absent}");
    }
    // Writing through a link out says the same, not "File exists".
    let r = h
        .run("return await tools.write_file({path: 'escape/x', content: 'x'})")
        .await;
    let e = r.error.unwrap();
    assert!(
        e.message.contains("leads outside the root"),
        "{}",
        e.message
    );
}

/// Ignore files count only inside the root: one in the directory above
/// hides nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_files_above_the_root_hide_nothing() {
    let above = tempfile::tempdir().unwrap();
    std::fs::write(above.path().join(".gitignore"), "*.txt\nsrc/\n").unwrap();
    let root = above.path().join("root");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("a.txt"), "needle\n").unwrap();
    std::fs::write(root.join("src/b.rs"), "needle\n").unwrap();
    std::fs::write(root.join("src/.gitignore"), "skip.rs\n").unwrap();
    std::fs::write(root.join("src/skip.rs"), "needle\n").unwrap();
    let h = harness(&root);
    let v = value(&h, "return await tools.grepFiles({pattern: 'needle'})").await;
    assert_eq!(v["files"], json!(["a.txt", "src/b.rs"]), "{v}");
    let v = value(&h, "return await tools.fileSearch({pattern: 'rs'})").await;
    assert_eq!(v["matches"].as_array().unwrap().len(), 1, "{v}");
}

/// listDir and grepFiles walk a very deep tree in a loop: the host never
/// runs out of stack, whatever the depth and the open-file limit.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(unsafe_code)]
async fn a_tree_thousands_of_levels_deep_is_walked_without_recursion() {
    let root = tempfile::tempdir().unwrap();
    const DEPTH: usize = 6000;
    // Built by descriptor (the path would pass PATH_MAX).
    let mut fd = std::fs::File::open(root.path()).unwrap();
    for _ in 0..DEPTH {
        let name = c"d";
        // SAFETY: mkdirat and openat read a NUL-terminated name relative
        // to a descriptor we hold.
        let next = unsafe {
            libc::mkdirat(std::os::fd::AsRawFd::as_raw_fd(&fd), name.as_ptr(), 0o755);
            libc::openat(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            )
        };
        assert!(next >= 0);
        // SAFETY: openat returned a new descriptor that nothing else owns.
        fd = unsafe { std::os::fd::FromRawFd::from_raw_fd(next) };
    }
    drop(fd);
    // The open-file limit as high as it goes (the case that overflowed).
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct we pass.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let h = harness(root.path());
    for script in [
        "return await tools.listDir({dirPath: '.', depth: 100000, limit: 1})",
        "return await tools.grepFiles({pattern: 'x'})",
        "return await tools.fileSearch({pattern: 'd'})",
    ] {
        let r = h.run(script).await;
        // It answers: a page, or a clear error where descriptors run out.
        if r.ok {
            let v = r.value.unwrap();
            if script.contains("listDir") {
                assert_eq!(v["total"], DEPTH, "{v}");
            }
        } else {
            let code = r.code();
            let e = r.error.unwrap();
            assert_eq!(
                code,
                Some(harness::ErrorCode::ToolExecutionError),
                "{}",
                e.message
            );
        }
    }
    // std's remove_dir_all would recurse as deep; rm does not.
    let removed = std::process::Command::new("rm")
        .arg("-rf")
        .arg(root.path())
        .status()
        .unwrap();
    assert!(removed.success());
}

/// `exec`'s child keeps none of the capabilities that matter even to
/// root: no device nodes, no administration, no tracing, not in its own
/// sets nor in what any program it runs can get back.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(unsafe_code)]
async fn exec_drops_the_capabilities_that_matter_to_root() {
    let (root, _outside) = fixture();
    let h = exec_harness(root.path(), harness::builtin::ExecPolicy::default());
    let v = exec_argv(&h, &["grep", "^Cap", "/proc/self/status"]).await;
    let out = v["stdout"].as_str().unwrap();
    let set = |name: &str| {
        let line = out
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{out}"));
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    // CAP_MKNOD 27, CAP_SYS_ADMIN 21, CAP_SYS_PTRACE 19, CAP_SETPCAP 8.
    let dropped = (1u64 << 27) | (1 << 21) | (1 << 19) | (1 << 8);
    for name in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
        assert_eq!(set(name) & dropped, 0, "{name} {out}");
    }
    // SAFETY: geteuid reads nothing.
    if unsafe { libc::geteuid() } == 0 {
        // Root keeps the rest (it still owns the files it made).
        assert_ne!(set("CapEff:"), 0, "{out}");
    }
}

/// The confinement cases answer alike on every engine built in: the
/// tools hold the line, whichever engine the script runs on.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_confinement_cases_answer_alike_on_every_engine() {
    let (root, _outside) = fixture();
    mkfifo(&root.path().join("f"));
    let script = r#"
        const out = {};
        const cases = {
          readOutside: () => tools.read_file({path: "escape/secret.txt"}),
          grepOutside: () => tools.grepFiles({pattern: "x", path: "escape/no-such"}),
          searchUp: () => tools.fileSearch({pattern: "x", searchDirectory: "../".repeat(40) + "etc"}),
          writeOutside: () => tools.write_file({path: "escape/x", content: "x"}),
          fifo: () => tools.readFile({filePath: "f"}),
          env: async () => (await tools.exec({command: ["/usr/bin/env"]})).stdout
            .split("\n").filter(Boolean).map(l => l.split("=")[0]).sort(),
          tty: async () => (await tools.exec({command: ["sh", "-c", "exec 3<>/dev/tty"]})).exitCode !== 0,
        };
        for (const [name, call] of Object.entries(cases)) {
          try { out[name] = await call(); } catch (e) { out[name] = e.name + ": " + e.message; }
        }
        return out;
    "#;
    let mut answers = Vec::new();
    for kind in harness::EngineKind::available() {
        let tools = harness::builtin::registry(root.path()).unwrap();
        // In process: the tools run in the host whatever the isolation,
        // and this test binary is no worker.
        let built = Harness::builder()
            .engine(kind)
            .isolation(harness::Isolation::InProcess)
            .tools(tools)
            .approvals(Arc::new(AutoApprove))
            .build();
        let h = match built {
            Ok(h) => h,
            Err(e) => {
                eprintln!("SKIPPED: engine {} cannot start here: {e}", kind.name());
                continue;
            }
        };
        let v = value(&h, script).await;
        answers.push((kind.name(), v));
    }
    let (first, want) = &answers[0];
    let outside = |tool: &str, path: &str| {
        format!("ToolExecutionError: {tool} failed: path {path} leads outside the root directory")
    };
    assert_eq!(
        want["readOutside"],
        outside("read_file", "escape/secret.txt"),
        "{want}"
    );
    assert_eq!(
        want["grepOutside"],
        outside("grepFiles", "escape/no-such"),
        "{want}"
    );
    assert!(
        want["searchUp"].as_str().unwrap().contains("leads outside"),
        "{want}"
    );
    assert_eq!(
        want["writeOutside"],
        outside("write_file", "escape/x"),
        "{want}"
    );
    assert!(
        want["fifo"]
            .as_str()
            .unwrap()
            .contains("not a regular file"),
        "{want}"
    );
    assert!(
        want["env"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| ["HOME", "LANG", "PATH", "TERM"].contains(&n.as_str().unwrap())),
        "{want}"
    );
    assert_eq!(want["tty"], true, "{want}");
    for (name, v) in &answers[1..] {
        assert_eq!(v, want, "{name} differs from {first}");
    }
    assert!(answers.len() >= 2, "only {} engine(s) ran", answers.len());
}

/// The user guide's tool reference names every built-in tool and every
/// argument its schema has: it cannot fall behind the schemas.
#[test]
fn the_user_guide_documents_every_tool_and_argument() {
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/user-guide.md"
    ))
    .unwrap();
    let root = tempfile::tempdir().unwrap();
    let reg = harness::builtin::registry(root.path()).unwrap();
    for name in reg.names() {
        let row = guide
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("no row for {name} in docs/user-guide.md"));
        let schema = reg.get(name).unwrap().schema();
        for arg in schema["properties"].as_object().unwrap().keys() {
            assert!(
                row.contains(arg.as_str()),
                "{name}'s argument {arg} is not in its row"
            );
        }
        if let Some(out) = reg.get(name).unwrap().output_schema() {
            for field in out["properties"]
                .as_object()
                .into_iter()
                .flat_map(|m| m.keys())
            {
                assert!(
                    row.contains(field.as_str()),
                    "{name}'s result field {field} is not in its row"
                );
            }
        }
    }
}
