//! `exec`'s confinement on Linux: a Landlock ruleset that lets the child
//! read and execute anywhere, write only under the root (and `/dev/null`),
//! and, unless the policy allows the network, neither connect nor bind a
//! TCP socket.
//!
//! The ruleset is built in the parent (opening paths allocates); the
//! child, between fork and exec, only makes the two system calls that
//! enforce it. Confinement is all or nothing: the kernel must support
//! Landlock ABI 3 (Linux 6.2: writes and truncation) and, when the
//! network is denied, ABI 4 (Linux 6.7: TCP); otherwise the child runs
//! unconfined and the result says so (`confined: false`).

use std::path::Path;

/// A ruleset ready to be enforced in a child, or why there is none.
pub(crate) enum Confinement {
    /// Enforced in the child by [`Confinement::apply`].
    Ready(Box<std::sync::Mutex<Option<landlock::RulesetCreated>>>),
    /// The child runs unconfined, for this reason.
    Unavailable(String),
}

impl Confinement {
    /// The ruleset for a child of `root`.
    pub(crate) fn for_root(root: &Path, allow_network: bool) -> Confinement {
        match build(root, allow_network) {
            Ok(r) => Confinement::Ready(Box::new(std::sync::Mutex::new(Some(r)))),
            Err(e) => Confinement::Unavailable(e.to_string()),
        }
    }

    /// Arranges for the child of `cmd` to enforce the ruleset before it
    /// executes its program; a child that cannot enforce it does not run.
    // pre_exec is unsafe: the closure runs between fork and exec.
    #[allow(unsafe_code)]
    pub(crate) fn apply(self, cmd: &mut tokio::process::Command) {
        let Confinement::Ready(cell) = self else {
            return;
        };
        // SAFETY: the closure allocates nothing and takes no lock another
        // thread could hold (the mutex lives in this child's copy of memory
        // and is only ever locked here): it sets no_new_privs and calls
        // landlock_restrict_self on a ruleset fd opened before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let ruleset = cell.lock().ok().and_then(|mut r| r.take());
                match ruleset.map(landlock::RulesetCreated::restrict_self) {
                    Some(Ok(s)) if s.ruleset == landlock::RulesetStatus::FullyEnforced => Ok(()),
                    _ => Err(std::io::Error::from_raw_os_error(libc::EPERM)),
                }
            });
        }
    }
}

fn build(
    root: &Path,
    allow_network: bool,
) -> Result<landlock::RulesetCreated, landlock::RulesetError> {
    use landlock::{
        path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset,
        RulesetAttr, RulesetCreatedAttr, ABI,
    };
    let fs = ABI::V3;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(fs))?;
    if !allow_network {
        ruleset = ruleset.handle_access(AccessNet::from_all(ABI::V4))?;
    }
    ruleset
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(fs)))?
        .add_rules(path_beneath_rules([root], AccessFs::from_all(fs)))?
        .add_rules(path_beneath_rules(["/dev/null"], AccessFs::from_all(fs)))
}
