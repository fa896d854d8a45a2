//! The worker protocol's messages, pinned: one of each kind, as the bytes
//! of its frame's body, in `tests/golden/protocol.txt`. A change to a
//! message's shape fails here first; bump [`PROTOCOL_VERSION`] with it
//! (the file's first line), then `UPDATE_GOLDEN=1` rewrites the file.

use super::*;
use crate::{ErrorCode, Phase};

fn to_worker() -> Vec<ToWorker> {
    vec![
        ToWorker::Init {
            address_space_bytes: Some(1 << 32),
            rings: true,
            session_memory_bytes: None,
        },
        ToWorker::Init {
            address_space_bytes: None,
            rings: false,
            session_memory_bytes: Some(256 << 20),
        },
        ToWorker::Run {
            config: r#"{"run":"0123","static":{}}"#.into(),
            config_delta: false,
            limits: Some(Limits::default()),
            timeout_ms: 30_000,
            source: "return 1".into(),
            spin: true,
            linger: false,
        },
        ToWorker::Drain {
            settles: vec![Settle {
                id: 7,
                ok: true,
                payload: "{\"a\":1}".into(),
            }],
            spin: false,
        },
        ToWorker::Classify {
            name: "RangeError".into(),
            message: "too deep".into(),
        },
        ToWorker::Reply {
            value: "ok".into(),
            spin: false,
        },
        ToWorker::Finish,
        ToWorker::Check {
            source: "let = ;".into(),
        },
        ToWorker::EvalGlobal {
            eval: GlobalEval::new("print(1)", true, 1000),
        },
    ]
}

fn from_worker() -> Vec<FromWorker> {
    vec![
        FromWorker::Hello {
            protocol: PROTOCOL_VERSION,
            engine: "quickjs".into(),
            version: "1.0".into(),
            rings: true,
        },
        FromWorker::HostOp {
            op: "call".into(),
            a: "echo".into(),
            b: "{}".into(),
        },
        FromWorker::Notice {
            op: "console".into(),
            a: "log".into(),
            b: "hi".into(),
        },
        FromWorker::Step {
            phase: StepPhase::Jobs,
            fault: Some(EngineFault::new(
                FaultKind::OutOfMemory,
                "InternalError",
                "out of memory",
            )),
            memory_used: Some(4096),
            exhausted: false,
            fuel_consumed: Some(12),
            kinds: vec![Classified {
                name: "TypeError".into(),
                message: "x is not a function".into(),
                kind: FaultKind::Thrown,
            }],
            context: Some(3),
        },
        FromWorker::Kind {
            kind: FaultKind::StackOverflow,
        },
        FromWorker::Ready,
        FromWorker::Kept {
            session_bytes: 1 << 20,
        },
        FromWorker::Checked {
            error: Some(ScriptError::new(
                ErrorCode::ScriptSyntaxError,
                Phase::Parsing,
                "unexpected token",
            )),
        },
        FromWorker::Global {
            outcome: GlobalEvalOutcome::Completed {
                prints: vec!["1".into()],
            },
        },
    ]
}

fn golden_text() -> String {
    let mut out = format!("protocol {PROTOCOL_VERSION}\n");
    for m in to_worker() {
        out.push_str(&format!(
            "to_worker {}\n",
            serde_json::to_string(&m).unwrap()
        ));
    }
    for m in from_worker() {
        out.push_str(&format!(
            "from_worker {}\n",
            serde_json::to_string(&m).unwrap()
        ));
    }
    out
}

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/protocol.txt");

#[test]
fn every_message_keeps_its_bytes() {
    let got = golden_text();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(PATH, &got).unwrap();
    }
    let want = std::fs::read_to_string(PATH).expect("UPDATE_GOLDEN=1 writes it");
    assert_eq!(
        got, want,
        "a worker message changed shape: bump PROTOCOL_VERSION, then UPDATE_GOLDEN=1 \
         (a changed default in Limits needs only the second)"
    );
}

/// Each pinned body parses back to a message that writes the same bytes:
/// a worker of this build reads what a host of this build writes, field
/// for field.
#[test]
fn every_pinned_body_reads_back() {
    let want = std::fs::read_to_string(PATH).expect("UPDATE_GOLDEN=1 writes it");
    for line in want.lines().skip(1) {
        let (side, body) = line.split_once(' ').unwrap();
        let again = match side {
            "to_worker" => serde_json::to_string(&serde_json::from_str::<ToWorker>(body).unwrap()),
            "from_worker" => {
                serde_json::to_string(&serde_json::from_str::<FromWorker>(body).unwrap())
            }
            other => panic!("unknown side {other}"),
        }
        .unwrap();
        assert_eq!(again, body);
    }
}

/// A frame is the body's length as a little-endian `u32`, then the body.
#[test]
fn a_frame_is_its_length_then_its_body() {
    let mut bytes = Vec::new();
    write_frame(&mut bytes, &ToWorker::Finish).unwrap();
    let body = br#"{"t":"finish"}"#;
    assert_eq!(&bytes[..4], &(body.len() as u32).to_le_bytes());
    assert_eq!(&bytes[4..], body);
    let back: ToWorker = read_frame(&mut &bytes[..]).unwrap();
    assert!(matches!(back, ToWorker::Finish));
}
