//! `exec`'s jail on Linux. Between fork and exec, the child:
//!
//! 1. starts a new session (`setsid`): no controlling terminal, and its
//!    own process group, which the parent kills whole when the call ends;
//! 2. marks every descriptor above stderr close-on-exec, so nothing the
//!    host process holds reaches the program;
//! 3. drops the capabilities that matter even to root (`CAP_MKNOD`,
//!    `CAP_SYS_ADMIN`, `CAP_SYS_PTRACE`, … [`DROPPED_CAPABILITIES`]) from
//!    its bounding, permitted, effective and inheritable sets, and clears
//!    the ambient set;
//! 4. when confined, enforces a Landlock ruleset at the highest ABI the
//!    kernel has (3 at least, 4 when the network is denied): read and
//!    execute anywhere, write only under the root (and `/dev/null`), no
//!    device nodes even there, no TCP unless allowed; from ABI 5 no
//!    ioctl on devices outside the root, from 6 no signal to and no
//!    abstract socket of a process outside the jail, from 9 no connect to
//!    a Unix socket outside the root;
//! 5. installs a seccomp filter (kept by every descendant) under which
//!    `setsid` and `setpgid` fail, so no descendant leaves the group that
//!    is killed; `mknod`, terminal injection (`TIOCSTI`, `TIOCLINUX`) and
//!    `ptrace` fail too, root or not.
//!
//! Everything is built in the parent (opening paths and compiling the
//! filter allocate); the child makes only the system calls that enforce
//! it. A child that cannot do all of it does not run.

use std::path::Path;

/// Landlock ABIs the jail knows; a newer kernel is used at the newest.
const NEWEST_ABI: i32 = 9;

/// What a child is jailed with, built in the parent.
pub(crate) struct Jail {
    /// The Landlock ruleset, or why the child runs without one.
    landlock: Result<Landlock, String>,
    /// The seccomp filter (absent on an architecture seccompiler lacks).
    filter: Option<seccompiler::BpfProgram>,
}

struct Landlock {
    ruleset: std::sync::Mutex<Option<landlock::RulesetCreated>>,
    abi: i32,
}

impl Jail {
    /// The jail for a child of `root`; confined by Landlock when `confine`.
    pub(crate) fn new(root: &Path, confine: bool, allow_network: bool) -> Jail {
        let landlock = if confine {
            ruleset(root, allow_network)
        } else {
            Err("confinement is off".to_owned())
        };
        Jail {
            landlock,
            filter: filter().ok(),
        }
    }

    /// The Landlock ABI the child is confined at, or why it is not.
    pub(crate) fn landlock_abi(&self) -> Result<i32, &str> {
        match &self.landlock {
            Ok(l) => Ok(l.abi),
            Err(why) => Err(why),
        }
    }

    /// Whether descendants are held in the child's process group.
    pub(crate) fn holds_the_group(&self) -> bool {
        self.filter.is_some()
    }

    /// Arranges for the child of `cmd` to enter the jail before it
    /// executes its program.
    // pre_exec is unsafe: the closure runs between fork and exec.
    #[allow(unsafe_code)]
    pub(crate) fn apply(self, cmd: &mut tokio::process::Command) {
        let Jail { landlock, filter } = self;
        let ruleset = landlock.ok().map(|l| l.ruleset);
        // SAFETY: the closure allocates nothing and takes no lock another
        // thread could hold (the mutex lives in this child's copy of
        // memory and is only ever locked here): it makes the system calls
        // listed in the module docs, on a ruleset descriptor and a filter
        // made before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                close_inherited_on_exec()?;
                drop_capabilities()?;
                if let Some(cell) = &ruleset {
                    let ruleset = cell.lock().ok().and_then(|mut r| r.take());
                    match ruleset.map(landlock::RulesetCreated::restrict_self) {
                        Some(Ok(s)) if s.ruleset == landlock::RulesetStatus::FullyEnforced => {}
                        _ => return Err(std::io::Error::from_raw_os_error(libc::EPERM)),
                    }
                }
                if let Some(filter) = &filter {
                    seccompiler::apply_filter(filter)
                        .map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))?;
                }
                Ok(())
            });
        }
    }
}

/// Capabilities no program `exec` runs keeps, root or not: device nodes,
/// administration, modules, raw I/O, tracing, reboot, the clock, the
/// network's configuration and raw sockets, chroot, immutable files,
/// security modules, the kernel log, BPF, performance monitoring,
/// checkpoints, resource limits, and (last) changing capability sets.
const DROPPED_CAPABILITIES: [u32; 19] = [
    27, // CAP_MKNOD
    21, // CAP_SYS_ADMIN
    16, // CAP_SYS_MODULE
    17, // CAP_SYS_RAWIO
    19, // CAP_SYS_PTRACE
    22, // CAP_SYS_BOOT
    25, // CAP_SYS_TIME
    12, // CAP_NET_ADMIN
    13, // CAP_NET_RAW
    18, // CAP_SYS_CHROOT
    9,  // CAP_LINUX_IMMUTABLE
    32, // CAP_MAC_OVERRIDE
    33, // CAP_MAC_ADMIN
    34, // CAP_SYSLOG
    39, // CAP_BPF
    38, // CAP_PERFMON
    40, // CAP_CHECKPOINT_RESTORE
    24, // CAP_SYS_RESOURCE
    8,  // CAP_SETPCAP
];

/// Takes [`DROPPED_CAPABILITIES`] out of the bounding set (so no program
/// this child executes, root's included, gets them back) and out of the
/// child's own sets, and clears the ambient set. Without privilege there
/// is nothing to drop (and `no_new_privs` keeps file capabilities from
/// adding any); a privileged child that cannot drop them does not run.
#[allow(unsafe_code)]
fn drop_capabilities() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const PR_CAP_AMBIENT: libc::c_int = 47;
    const PR_CAP_AMBIENT_CLEAR_ALL: libc::c_ulong = 4;
    // SAFETY: geteuid reads nothing we pass.
    let privileged = unsafe { libc::geteuid() } == 0;
    for cap in DROPPED_CAPABILITIES {
        // SAFETY: prctl with integer arguments touches no memory of ours.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        let errno = std::io::Error::last_os_error().raw_os_error();
        // EINVAL: a capability this kernel does not know.
        if r != 0 && privileged && errno != Some(libc::EINVAL) {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: as above; a kernel without ambient capabilities says EINVAL.
    unsafe { libc::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget writes one header and two data structs, which we pass.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    for cap in DROPPED_CAPABILITIES {
        let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
        data[word].effective &= !bit;
        data[word].permitted &= !bit;
        data[word].inheritable &= !bit;
    }
    // SAFETY: capset reads the header and two data structs we pass.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 && privileged {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Marks every descriptor above stderr close-on-exec (the error pipe
/// through which std reports a failed exec already is).
#[allow(unsafe_code)]
fn close_inherited_on_exec() -> std::io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    // SAFETY: close_range changes flags of this process's descriptors only.
    let marked =
        unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) } == 0;
    if marked {
        return Ok(());
    }
    // Kernels before 5.11: each descriptor up to the limit of open files.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let max = lim.rlim_cur.min(1 << 20) as i32;
    for fd in 3..max {
        // SAFETY: as above; a descriptor that is not open is EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// The kernel's Landlock ABI (0 or less: none).
#[allow(unsafe_code)]
pub(crate) fn kernel_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: with no attributes, landlock_create_ruleset reads no memory
    // and only returns the version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(v).unwrap_or(0)
}

fn ruleset(root: &Path, allow_network: bool) -> Result<Landlock, String> {
    use landlock::{
        path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset,
        RulesetAttr, RulesetCreatedAttr, Scope, ABI,
    };
    let kernel = kernel_abi();
    let needed = if allow_network { 3 } else { 4 };
    if kernel < needed {
        return Err(format!(
            "Landlock ABI {kernel} on this kernel ({needed} needed)"
        ));
    }
    let abi_n = kernel.min(NEWEST_ABI);
    let abi = ABI::from(abi_n);
    let build = || -> Result<landlock::RulesetCreated, landlock::RulesetError> {
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))?;
        if !allow_network {
            ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
        }
        if abi_n >= 6 {
            ruleset = ruleset.scope(Scope::from_all(abi))?;
        }
        let in_root = AccessFs::from_all(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock);
        ruleset
            .create()?
            .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
            .add_rules(path_beneath_rules([root], in_root))?
            .add_rules(path_beneath_rules(["/dev/null"], AccessFs::from_all(abi)))
    };
    let ruleset = build().map_err(|e| e.to_string())?;
    Ok(Landlock {
        ruleset: std::sync::Mutex::new(Some(ruleset)),
        abi: abi_n,
    })
}

/// The seccomp filter: what fails with `EPERM` for the child and all its
/// descendants.
// The ioctl requests' type differs between targets.
#[allow(clippy::unnecessary_cast)]
fn filter() -> Result<seccompiler::BpfProgram, seccompiler::BackendError> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| seccompiler::BackendError::InvalidTargetArch(std::env::consts::ARCH.into()))?;
    let always = Vec::new;
    let ioctl = |request: u64| {
        SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, request)
            .and_then(|c| SeccompRule::new(vec![c]))
    };
    let mut rules = std::collections::BTreeMap::new();
    for call in [
        libc::SYS_setsid,
        libc::SYS_setpgid,
        libc::SYS_mknodat,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
    ] {
        rules.insert(call, always());
    }
    #[cfg(target_arch = "x86_64")]
    rules.insert(libc::SYS_mknod, always());
    rules.insert(
        libc::SYS_ioctl,
        vec![ioctl(libc::TIOCSTI as u64)?, ioctl(libc::TIOCLINUX as u64)?],
    );
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?;
    filter.try_into()
}
