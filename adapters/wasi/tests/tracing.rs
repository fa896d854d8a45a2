//! The sandbox's tracing events. Alone in its own test binary: tracing
//! caches each callsite's interest process-wide, and a test running beside
//! this one without a subscriber can register a callsite first and leave
//! it disabled for this test's scoped subscriber.

use harness_wasi::{Sandbox, SandboxPolicy};

/// Collects the `event` field of every tracing event.
#[derive(Default)]
struct Events(std::sync::Mutex<Vec<String>>);

struct EventField<'a>(&'a mut Option<String>);

impl tracing::field::Visit for EventField<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "event" {
            *self.0 = Some(value.to_owned());
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "event" {
            *self.0 = Some(format!("{value:?}").trim_matches('"').to_owned());
        }
    }
}

impl tracing::Subscriber for Events {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut name = None;
        event.record(&mut EventField(&mut name));
        if let Some(n) = name {
            self.0.lock().unwrap().push(n);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn runs_log_start_completion_and_fuel_exhaustion() {
    let root = tempfile::tempdir().unwrap();
    let events = std::sync::Arc::new(Events::default());
    let policy = SandboxPolicy {
        fuel: Some(20_000_000),
        ..SandboxPolicy::default()
    };
    let sb = Sandbox::new(policy, "s", root.path()).expect("valid session");
    tracing::subscriber::with_default(events.clone(), || {
        sb.execute("while (true) {}").expect("the sandbox runs");
    });
    let seen = events.0.lock().unwrap().clone();
    assert_eq!(seen, vec!["start", "fuel_exhaustion", "completion"]);
}
