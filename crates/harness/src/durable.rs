//! Durable runs: continuations sealed and opened, their keys, and the
//! ledger that lets each resume at most once (docs/user-guide.md
//! "Durable runs", docs/security.md "Continuations").
//!
//! A sealed continuation is `HSCT`, a format byte, the sealing key's id,
//! the continuation's id, a 24-byte random nonce, and the zstd-compressed
//! plain continuation encrypted with XChaCha20-Poly1305 under that key;
//! everything before the ciphertext is authenticated with it. Tool
//! results in the heap stay confidential, and a changed byte anywhere is
//! refused.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use harness_core::durable::{pending_calls, Answer, DEFAULT_MAX_SUSPENDED_MS};

const MAGIC: &[u8; 4] = b"HSCT";
const FORMAT: u8 = 1;
const NONCE_BYTES: usize = 24;
/// An opened continuation is at most this large (a JavaScript heap at its
/// memory limit, and then some).
const MAX_PLAIN_BYTES: u64 = 1 << 31;

/// The key file the CLI makes in its state directory.
pub const KEY_FILE: &str = "continuation.key";

/// `[durable]` in the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct DurableSettings {
    /// Environment variables that hold keys (32 bytes, base64 or hex): the
    /// first seals, all open (rotation). None: the CLI's key file in
    /// `state_dir`.
    pub keys_env: Vec<String>,
    /// Where the CLI keeps its key and the ids of continuations used;
    /// default `$XDG_STATE_HOME/harness` (`~/.local/state/harness`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    /// How long a continuation may wait before it expires.
    pub max_suspended_ms: u64,
}

impl Default for DurableSettings {
    fn default() -> Self {
        DurableSettings {
            keys_env: Vec::new(),
            state_dir: None,
            max_suspended_ms: DEFAULT_MAX_SUSPENDED_MS,
        }
    }
}

impl DurableSettings {
    /// `state_dir`, or the default one.
    pub fn state_dir(&self) -> Option<PathBuf> {
        self.state_dir.clone().or_else(default_state_dir)
    }

    /// The keys `keys_env` names, or (none named) the key file in the
    /// state directory, made on first use.
    pub fn keys(&self) -> Result<ContinuationKeys, DurableError> {
        if !self.keys_env.is_empty() {
            return ContinuationKeys::from_env(&self.keys_env);
        }
        let dir = self.state_dir().ok_or(DurableError::NoStateDir)?;
        ContinuationKeys::load_or_create(&dir)
    }
}

/// `$XDG_STATE_HOME/harness`, else `$HOME/.local/state/harness`.
pub fn default_state_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("harness"));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(PathBuf::from(home).join(".local/state/harness"))
}

/// Why keys or a ledger could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DurableError {
    /// A key variable is unset or not a 32-byte key.
    #[error("{0}")]
    BadKey(String),
    /// No state directory: neither `[durable] state_dir`, `XDG_STATE_HOME` nor `HOME`.
    #[error("no state directory for continuation keys: set [durable] state_dir or keys_env")]
    NoStateDir,
    /// The state directory could not be read or written.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

#[derive(Clone)]
struct Key {
    id: String,
    cipher: XChaCha20Poly1305,
}

/// The keys continuations are sealed and opened with: the first seals,
/// every one opens.
#[derive(Clone)]
pub struct ContinuationKeys {
    keys: Vec<Key>,
}

impl fmt::Debug for ContinuationKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("ContinuationKeys")
            .field("ids", &ids)
            .finish()
    }
}

/// A key's id: `k` and 16 hex digits of its SHA-256, the same wherever
/// the key is.
fn key_id(key: &[u8; 32]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(b"harness continuation key id\0");
    h.update(key);
    let d = h.finalize();
    let hex: String = d[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("k{hex}")
}

/// A key as text: 32 bytes in base64 or 64 hex digits (`what` names it
/// in the error).
pub(crate) fn parse_key(text: &str, what: &str) -> Result<[u8; 32], DurableError> {
    use base64::Engine as _;
    let t = text.trim();
    let bytes = if t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
        (0..32)
            .map(|i| u8::from_str_radix(&t[2 * i..2 * i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .ok()
    } else {
        base64::engine::general_purpose::STANDARD.decode(t).ok()
    };
    bytes
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| {
            DurableError::BadKey(format!(
                "{what} is not a continuation key: 32 bytes as base64 or 64 hex digits"
            ))
        })
}

impl ContinuationKeys {
    /// One key, which seals and opens.
    pub fn new(key: [u8; 32]) -> Self {
        ContinuationKeys {
            keys: vec![Key::of(&key)],
        }
    }

    /// The same, also opening what `key` sealed (an older key).
    pub fn also_opening(mut self, key: [u8; 32]) -> Self {
        self.keys.push(Key::of(&key));
        self
    }

    /// A fresh random key.
    pub fn generate() -> Result<Self, DurableError> {
        Ok(ContinuationKeys::new(random_key()?))
    }

    /// The keys in these environment variables, the first sealing.
    pub fn from_env(names: &[String]) -> Result<Self, DurableError> {
        let mut keys = Vec::with_capacity(names.len());
        for name in names {
            let value = std::env::var(name).map_err(|_| {
                DurableError::BadKey(format!("[durable] keys_env names {name}, which is not set"))
            })?;
            keys.push(Key::of(&parse_key(&value, name)?));
        }
        if keys.is_empty() {
            return Err(DurableError::BadKey("[durable] keys_env is empty".into()));
        }
        Ok(ContinuationKeys { keys })
    }

    /// The key in `dir/continuation.key`, made (mode 0600) if there is none.
    pub fn load_or_create(dir: &Path) -> Result<Self, DurableError> {
        let file = dir.join(KEY_FILE);
        let io = |what: &str, e| DurableError::Io(format!("{what} {}", file.display()), e);
        match std::fs::read_to_string(&file) {
            Ok(text) => {
                return Ok(ContinuationKeys::new(parse_key(
                    &text,
                    &file.display().to_string(),
                )?))
            }
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io("cannot read", e)),
            Err(_) => {}
        }
        create_private_dir(dir).map_err(|e| io("cannot make the directory of", e))?;
        let key = random_key()?;
        let text = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(key)
        };
        match write_new_private(&file, text.as_bytes()) {
            Ok(()) => Ok(ContinuationKeys::new(key)),
            // Another process made it first: use that one.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let text = std::fs::read_to_string(&file).map_err(|e| io("cannot read", e))?;
                Ok(ContinuationKeys::new(parse_key(
                    &text,
                    &file.display().to_string(),
                )?))
            }
            Err(e) => Err(io("cannot write", e)),
        }
    }

    /// The id of the key that seals.
    pub fn sealing_key_id(&self) -> &str {
        &self.keys[0].id
    }

    /// Seals `plain` (continuation `id`).
    pub fn seal(&self, id: &str, plain: &[u8]) -> Result<Vec<u8>, String> {
        let key = &self.keys[0];
        let compressed = zstd::bulk::compress(plain, 3).map_err(|e| e.to_string())?;
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(compressed.len() + 128);
        out.extend_from_slice(MAGIC);
        out.push(FORMAT);
        push_short(&mut out, key.id.as_bytes())?;
        push_short(&mut out, id.as_bytes())?;
        out.extend_from_slice(&nonce);
        let aad_len = out.len();
        let sealed = key
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &compressed,
                    aad: &out[..aad_len],
                },
            )
            .map_err(|_| "the continuation could not be sealed".to_owned())?;
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    /// Opens what [`seal`](Self::seal) made: the continuation's id and its
    /// plain bytes. The error says why not: not a continuation, an unknown
    /// key, or a byte changed.
    pub fn open(&self, sealed: &[u8]) -> Result<(String, Vec<u8>), String> {
        let bad = || "the file is not a continuation this harness makes".to_owned();
        let rest = sealed.strip_prefix(MAGIC).ok_or_else(bad)?;
        let (&format, rest) = rest.split_first().ok_or_else(bad)?;
        if format != FORMAT {
            return Err(format!(
                "the continuation's format is {format}; this harness reads {FORMAT}"
            ));
        }
        let (key_id, rest) = take_short(rest).ok_or_else(bad)?;
        let (id, rest) = take_short(rest).ok_or_else(bad)?;
        if rest.len() < NONCE_BYTES {
            return Err(bad());
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_BYTES);
        let key_id = std::str::from_utf8(key_id).map_err(|_| bad())?;
        let id = std::str::from_utf8(id).map_err(|_| bad())?.to_owned();
        let key = self.keys.iter().find(|k| k.id == key_id).ok_or_else(|| {
            format!(
                "the continuation was sealed with key {key_id}, which this harness does not have"
            )
        })?;
        let aad = &sealed[..sealed.len() - ciphertext.len()];
        let compressed = key
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad,
                },
            )
            .map_err(|_| "the continuation was changed after it was sealed".to_owned())?;
        // The frame says how large it is (`seal` compresses in one go):
        // one buffer of that size, bounded.
        let size = match zstd::zstd_safe::get_frame_content_size(&compressed) {
            Ok(Some(n)) if n <= MAX_PLAIN_BYTES => n as usize,
            Ok(Some(_)) => return Err("the continuation is too large".to_owned()),
            _ => return Err("the continuation does not say its size".to_owned()),
        };
        let plain = zstd::bulk::decompress(&compressed, size)
            .map_err(|e| format!("the continuation does not decompress: {e}"))?;
        Ok((id, plain))
    }
}

impl Key {
    fn of(key: &[u8; 32]) -> Key {
        Key {
            id: key_id(key),
            cipher: XChaCha20Poly1305::new(key.into()),
        }
    }
}

fn random_key() -> Result<[u8; 32], DurableError> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| DurableError::BadKey(format!("no random key: {e}")))?;
    Ok(key)
}

fn push_short(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), String> {
    let len = u8::try_from(bytes.len()).map_err(|_| "an id is too long".to_owned())?;
    out.push(len);
    out.extend_from_slice(bytes);
    Ok(())
}

fn take_short(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&len, rest) = bytes.split_first()?;
    (rest.len() >= len as usize).then(|| rest.split_at(len as usize))
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}

fn write_new_private(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o.open(file)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Remembers which continuations were resumed, so that each resumes at
/// most once.
pub trait Ledger: Send + Sync + fmt::Debug {
    /// Takes continuation `id` (valid until `expires_at_ms`): true the
    /// first time, false ever after.
    fn claim(&self, id: &str, expires_at_ms: u64) -> Result<bool, String>;
}

/// A ledger in this process's memory: once per harness and its clones.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    used: Mutex<std::collections::HashMap<String, u64>>,
}

impl Ledger for MemoryLedger {
    fn claim(&self, id: &str, expires_at_ms: u64) -> Result<bool, String> {
        let mut used = self
            .used
            .lock()
            .map_err(|_| "the ledger is poisoned".to_owned())?;
        let now = now_ms();
        used.retain(|_, exp| *exp >= now);
        Ok(used.insert(id.to_owned(), expires_at_ms).is_none())
    }
}

/// A ledger in a directory (the CLI's `STATE_DIR/used`): one file per
/// continuation resumed, made with `O_EXCL`, so that two processes cannot
/// both take one. Files of expired continuations are removed.
#[derive(Debug, Clone)]
pub struct DirLedger {
    dir: PathBuf,
}

impl DirLedger {
    /// The ledger in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DirLedger { dir: dir.into() }
    }

    fn prune(&self, now: u64) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let expired = std::fs::read_to_string(e.path())
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .is_some_and(|exp| exp < now);
            if expired {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

impl Ledger for DirLedger {
    fn claim(&self, id: &str, expires_at_ms: u64) -> Result<bool, String> {
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!("{id:?} is not a continuation id"));
        }
        create_private_dir(&self.dir)
            .map_err(|e| format!("cannot make {}: {e}", self.dir.display()))?;
        self.prune(now_ms());
        match write_new_private(&self.dir.join(id), expires_at_ms.to_string().as_bytes()) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(format!("cannot write to {}: {e}", self.dir.display())),
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What a harness whose runs may suspend holds
/// ([`HarnessBuilder::suspend`](crate::HarnessBuilder::suspend)): the
/// keys, the ledger, and how long a continuation may wait.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DurableRuns {
    /// Seal and open continuations.
    pub keys: Arc<ContinuationKeys>,
    /// Lets each resume once.
    pub ledger: Arc<dyn Ledger>,
    /// How long a continuation may wait.
    pub max_suspended_ms: u64,
}

impl DurableRuns {
    /// Runs sealed with `keys`, each resumed once per process, waiting a
    /// day at most.
    pub fn new(keys: ContinuationKeys) -> Self {
        DurableRuns {
            keys: Arc::new(keys),
            ledger: Arc::new(MemoryLedger::default()),
            max_suspended_ms: DEFAULT_MAX_SUSPENDED_MS,
        }
    }

    /// The same with another ledger (a [`DirLedger`], the fleet's Redis).
    pub fn with_ledger(mut self, ledger: Arc<dyn Ledger>) -> Self {
        self.ledger = ledger;
        self
    }

    /// The same, continuations expiring after `ms`.
    pub fn with_max_suspended_ms(mut self, ms: u64) -> Self {
        self.max_suspended_ms = ms;
        self
    }

    /// What a request carries to be allowed to suspend
    /// (`ExecutionRequest::durable`): these keys seal.
    pub fn core(&self) -> harness_core::durable::Durable {
        harness_core::durable::Durable::new(Arc::new(KeySealer(self.keys.clone())))
            .with_max_suspended_ms(self.max_suspended_ms)
    }
}

#[derive(Debug)]
struct KeySealer(Arc<ContinuationKeys>);

impl harness_core::durable::Sealer for KeySealer {
    fn seal(&self, id: &str, plain: &[u8]) -> Result<Vec<u8>, String> {
        self.0.seal(id, plain)
    }
}

/// Answers given the way people and programs give them: one verdict
/// for every approval, and results or failures of deferred calls by id
/// (the CLI's `--approve`, `--answer`, `--fail`; the fleet's `resume`;
/// the bindings' `resume`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Answers {
    /// Every approval it waits on: given (`true`) or refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve: Option<bool>,
    /// Deferred calls' results, by call id.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub answers: std::collections::BTreeMap<u64, serde_json::Value>,
    /// Deferred calls' failures (the script sees ToolExecutionError), by call id.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub failures: std::collections::BTreeMap<u64, String>,
}

impl Answers {
    /// An [`Answer`] for each of `pending`, or which one has none; a
    /// result or failure for a call that is not pending is refused too.
    pub fn for_calls(
        &self,
        pending: &[crate::PendingCall],
    ) -> Result<std::collections::BTreeMap<u64, Answer>, String> {
        let mut out = std::collections::BTreeMap::new();
        for call in pending {
            let id = call.call_id;
            let answer = match call.kind {
                crate::PendingKind::Approval => match self.approve {
                    Some(true) => Answer::Approve,
                    Some(false) => Answer::Deny {
                        reason: Some("denied at resume".to_owned()),
                    },
                    None => {
                        return Err(format!(
                            "call {id} ({} {}) waits on an approval, and no verdict was given",
                            call.tool, call.args
                        ))
                    }
                },
                _ => match (self.answers.get(&id), self.failures.get(&id)) {
                    (Some(v), _) => Answer::Result { value: v.clone() },
                    (None, Some(m)) => Answer::Error { message: m.clone() },
                    (None, None) => {
                        return Err(format!(
                            "call {id} ({} {}) waits on a deferred result, and none was given",
                            call.tool, call.args
                        ))
                    }
                },
            };
            out.insert(id, answer);
        }
        let extra = self
            .answers
            .keys()
            .chain(self.failures.keys())
            .find(|id| !out.contains_key(id));
        if let Some(id) = extra {
            return Err(format!("call {id} is not waiting on an answer"));
        }
        Ok(out)
    }
}

/// The sealed bytes of a continuation given as bytes or as the report's
/// base64 text.
pub fn continuation_bytes(given: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    use base64::Engine as _;
    if given.starts_with(MAGIC) {
        return std::borrow::Cow::Borrowed(given);
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let decoded = match engine.decode(given) {
        Ok(d) => Ok(d),
        Err(_) => {
            let text: Vec<u8> = given
                .iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            engine.decode(text)
        }
    };
    match decoded {
        Ok(d) => std::borrow::Cow::Owned(d),
        Err(_) => std::borrow::Cow::Borrowed(given),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_continuation_opens_once_and_refuses_any_changed_byte() {
        let keys = ContinuationKeys::generate().unwrap();
        let plain = b"the heap, with a secret tool result".repeat(100);
        let sealed = keys.seal("cnt_ab", &plain).unwrap();
        assert!(sealed.len() < plain.len(), "compressed");
        assert!(!sealed.windows(6).any(|w| w == b"secret"), "encrypted");
        assert_eq!(keys.open(&sealed).unwrap(), ("cnt_ab".to_owned(), plain));
        for i in [0, 4, 6, 20, sealed.len() / 2, sealed.len() - 1] {
            let mut t = sealed.clone();
            t[i] ^= 1;
            assert!(keys.open(&t).is_err(), "byte {i} flipped");
        }
        assert!(keys.open(&sealed[..sealed.len() - 1]).is_err());
        let other = ContinuationKeys::generate().unwrap();
        let e = other.open(&sealed).unwrap_err();
        assert!(e.contains(keys.sealing_key_id()), "{e}");
    }

    #[test]
    fn an_older_key_still_opens_what_it_sealed() {
        let old = [7u8; 32];
        let sealed = ContinuationKeys::new(old).seal("cnt_1", b"x").unwrap();
        let rotated = ContinuationKeys::new([9u8; 32]).also_opening(old);
        assert_eq!(rotated.open(&sealed).unwrap().1, b"x");
        let fresh = rotated.seal("cnt_2", b"y").unwrap();
        assert!(ContinuationKeys::new(old).open(&fresh).is_err());
    }

    #[test]
    fn keys_come_from_hex_or_base64_and_a_private_key_file() {
        let hex = "00".repeat(32);
        assert_eq!(parse_key(&hex, "X").unwrap(), [0u8; 32]);
        assert!(parse_key(&"AAAA".repeat(10), "X").is_err(), "30 bytes");
        let b64 = "AQ".to_owned() + &"A".repeat(41) + "=";
        assert_eq!(parse_key(&b64, "X").unwrap()[0], 1);
        assert!(parse_key("short", "X").is_err());
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let a = ContinuationKeys::load_or_create(&state).unwrap();
        let b = ContinuationKeys::load_or_create(&state).unwrap();
        assert_eq!(a.sealing_key_id(), b.sealing_key_id());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(state.join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_directory_ledger_takes_each_id_once() {
        let dir = tempfile::tempdir().unwrap();
        let l = DirLedger::new(dir.path().join("used"));
        let later = now_ms() + 60_000;
        assert!(l.claim("cnt_1", later).unwrap());
        assert!(!l.claim("cnt_1", later).unwrap());
        assert!(!DirLedger::new(dir.path().join("used"))
            .claim("cnt_1", later)
            .unwrap());
        assert!(l.claim("../x", later).is_err());
        assert!(l.claim("cnt_old", 1).unwrap());
        assert!(l.claim("cnt_2", later).unwrap());
        assert!(
            !dir.path().join("used/cnt_old").exists(),
            "expired ids are pruned"
        );
        let m = MemoryLedger::default();
        assert!(m.claim("a", later).unwrap());
        assert!(!m.claim("a", later).unwrap());
    }
}
