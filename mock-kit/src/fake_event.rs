//! A fake's event as a typed value: each fake keeps one enum of everything it reports,
//! and the enum says, variant by variant, which kind and which detail the timeline
//! stores. [`crate::Events::emit_event`] takes such a value, so a call site names the
//! event and its fields, never a kind string and a hand-built JSON object.

/// One event a fake reports, as the timeline stores it: a kind and a detail.
///
/// [`FakeEvent::detail`] is only called when someone listens (a sink is installed), so
/// building the JSON costs nothing on a fake nobody watches.
pub trait FakeEvent {
    /// The event's kind on the timeline (`"state"`, `"fault"`, `"heartbeat"`, …).
    fn kind(&self) -> &'static str;

    /// The event's detail on the timeline, exactly as the fake writes it.
    fn detail(&self) -> serde_json::Value;
}
