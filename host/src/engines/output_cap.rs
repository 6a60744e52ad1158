//! What an engine writes to its stdout and stderr, bounded on its way to the host's log: an
//! isolated worker's two streams ([`super::isolation::process`]) and, in process, what engine
//! code writes to the process's descriptors 1 and 2 once [`super::stdio`] moved them away.
//!
//! Every forwarded line names its source (the engine, or "in-process engine code") and the
//! stream, and is sanitized (escape sequences removed, control characters made spaces, cut at
//! [`LINE_BYTES`]). At most [`LINES_PER_SECOND`] lines and [`BYTES_PER_SECOND`] bytes are
//! forwarded per second, and — for a worker, whose calls the host knows — at most
//! [`LINES_PER_CALL`] lines and [`BYTES_PER_CALL`] bytes per call; the rest is dropped and
//! counted, and the count is logged once per second while there is one. A source that had to
//! drop output [`FLOOD_SECONDS`] seconds in a row is flooding ([`Verdict::Flooding`]): the
//! worker is killed and its engine quarantined.

use std::time::{Duration, Instant};

/// Lines forwarded per second, per source.
pub const LINES_PER_SECOND: u32 = 50;
/// Bytes forwarded per second, per source.
pub const BYTES_PER_SECOND: usize = 16 << 10;
/// Lines forwarded per call (isolated workers).
pub const LINES_PER_CALL: u32 = 200;
/// Bytes forwarded per call (isolated workers).
pub const BYTES_PER_CALL: usize = 64 << 10;
/// The longest line forwarded; a longer one is cut (and the rest of it counted as dropped).
pub const LINE_BYTES: usize = 1024;
/// Seconds in a row with dropped output that make a source flooding.
pub const FLOOD_SECONDS: u32 = 3;

/// One of the two streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Descriptor 1.
    Stdout,
    /// Descriptor 2.
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Whether a source keeps within the caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It does, or it exceeded them less than [`FLOOD_SECONDS`] seconds in a row.
    Within,
    /// It dropped output this many seconds in a row (at least [`FLOOD_SECONDS`]).
    Flooding(u32),
}

/// The caps of one source, and its partial lines.
#[derive(Debug)]
pub struct OutputCap {
    source: String,
    engine_id: Option<String>,
    window_start: Instant,
    window_lines: u32,
    window_bytes: usize,
    call: u64,
    call_lines: u32,
    call_bytes: usize,
    dropped_lines: u64,
    dropped_bytes: u64,
    dropped_seconds: u32,
    partial: [Vec<u8>; 2],
    /// Lines forwarded and dropped since the start (for tests and the final report).
    pub totals: (u64, u64),
}

impl OutputCap {
    /// The caps of `source` (`engine worker "<id>"`, `in-process engine code`), whose lines are
    /// logged with `engine_id` when it is known.
    pub fn new(source: impl Into<String>, engine_id: Option<String>, now: Instant) -> Self {
        OutputCap {
            source: source.into(),
            engine_id,
            window_start: now,
            window_lines: 0,
            window_bytes: 0,
            call: 0,
            call_lines: 0,
            call_bytes: 0,
            dropped_lines: 0,
            dropped_bytes: 0,
            dropped_seconds: 0,
            partial: [Vec::new(), Vec::new()],
            totals: (0, 0),
        }
    }

    /// Takes `bytes` of `stream`, written during call number `call` (`None`: calls are not
    /// known, no per-call cap), forwarding each complete line within the caps.
    pub fn feed(
        &mut self,
        stream: Stream,
        bytes: &[u8],
        call: Option<u64>,
        now: Instant,
    ) -> Verdict {
        let verdict = self.tick(now);
        if let Some(call) = call {
            if call != self.call {
                self.call = call;
                self.call_lines = 0;
                self.call_bytes = 0;
            }
        }
        let per_call = call.is_some();
        let index = stream as usize;
        let mut rest = bytes;
        while !rest.is_empty() {
            let partial = &mut self.partial[index];
            match rest.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    let room = LINE_BYTES.saturating_sub(partial.len());
                    let take = end.min(room);
                    partial.extend_from_slice(&rest[..take]);
                    self.dropped_bytes += (end - take) as u64;
                    let line = std::mem::take(partial);
                    self.line(stream, &line, per_call);
                    rest = &rest[end + 1..];
                }
                None => {
                    let room = LINE_BYTES.saturating_sub(partial.len());
                    let take = rest.len().min(room);
                    partial.extend_from_slice(&rest[..take]);
                    self.dropped_bytes += (rest.len() - take) as u64;
                    if partial.len() >= LINE_BYTES {
                        // A line that never ends is forwarded cut, once it is that long.
                        let line = std::mem::take(partial);
                        self.line(stream, &line, per_call);
                    }
                    rest = &[];
                }
            }
        }
        verdict
    }

    fn line(&mut self, stream: Stream, line: &[u8], per_call: bool) {
        let len = line.len() + 1;
        let over_second =
            self.window_lines >= LINES_PER_SECOND || self.window_bytes + len > BYTES_PER_SECOND;
        let over_call = per_call
            && (self.call_lines >= LINES_PER_CALL || self.call_bytes + len > BYTES_PER_CALL);
        if over_second || over_call {
            self.dropped_lines += 1;
            self.dropped_bytes += len as u64;
            self.totals.1 += 1;
            return;
        }
        self.window_lines += 1;
        self.window_bytes += len;
        self.call_lines += 1;
        self.call_bytes += len;
        self.totals.0 += 1;
        let text = crate::types::sanitize_text(&String::from_utf8_lossy(line), LINE_BYTES);
        let stream = stream.name();
        match &self.engine_id {
            Some(engine_id) => tracing::warn!(
                target: "pincer::plugin",
                engine_id = %engine_id,
                stream,
                "{} {stream}: {text}",
                self.source
            ),
            None => {
                tracing::warn!(target: "pincer::plugin", stream, "{} {stream}: {text}", self.source)
            }
        }
    }

    /// Ends the current second once it is over: logs what was dropped in it, and says whether
    /// the source is flooding.
    pub fn tick(&mut self, now: Instant) -> Verdict {
        if now.duration_since(self.window_start) < Duration::from_secs(1) {
            return self.verdict();
        }
        if self.dropped_lines > 0 || self.dropped_bytes > 0 {
            self.dropped_seconds += 1;
            self.report_dropped();
        } else {
            self.dropped_seconds = 0;
        }
        self.window_start = now;
        self.window_lines = 0;
        self.window_bytes = 0;
        self.verdict()
    }

    fn verdict(&self) -> Verdict {
        if self.dropped_seconds >= FLOOD_SECONDS {
            Verdict::Flooding(self.dropped_seconds)
        } else {
            Verdict::Within
        }
    }

    fn report_dropped(&mut self) {
        let (lines, bytes) = (self.dropped_lines, self.dropped_bytes);
        self.dropped_lines = 0;
        self.dropped_bytes = 0;
        let message = format!(
            "{}: dropped {lines} line(s), {bytes} byte(s) of output beyond the caps ({LINES_PER_SECOND} lines or {} KiB per second, {LINES_PER_CALL} lines or {} KiB per call; docs/ISOLATION.md)",
            self.source,
            BYTES_PER_SECOND >> 10,
            BYTES_PER_CALL >> 10,
        );
        match &self.engine_id {
            Some(engine_id) => {
                tracing::warn!(target: "pincer::plugin", engine_id = %engine_id, "{message}")
            }
            None => tracing::warn!(target: "pincer::plugin", "{message}"),
        }
    }

    /// The streams ended: forwards what is left of a partial line and the last count.
    pub fn finish(&mut self) {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let line = std::mem::take(&mut self.partial[stream as usize]);
            if !line.is_empty() {
                self.line(stream, &line, false);
            }
        }
        if self.dropped_lines > 0 || self.dropped_bytes > 0 {
            self.report_dropped();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_beyond_the_caps_are_dropped_and_three_seconds_of_it_is_flooding() {
        let start = Instant::now();
        let mut cap = OutputCap::new("test", Some("e".into()), start);
        let flood = "x\n".repeat(1000);
        assert_eq!(
            cap.feed(Stream::Stderr, flood.as_bytes(), None, start),
            Verdict::Within
        );
        assert_eq!(
            cap.totals,
            (
                u64::from(LINES_PER_SECOND),
                1000 - u64::from(LINES_PER_SECOND)
            )
        );
        // Seconds 0, 1 and 2 each drop output: at the end of the third, it is flooding.
        let mut verdict = Verdict::Within;
        for second in 1..FLOOD_SECONDS {
            let now = start + Duration::from_secs(u64::from(second));
            verdict = cap.feed(Stream::Stdout, flood.as_bytes(), Some(1), now);
        }
        assert_eq!(
            verdict,
            Verdict::Within,
            "two seconds of drops are not a flood"
        );
        let third = start + Duration::from_secs(u64::from(FLOOD_SECONDS));
        assert_eq!(cap.tick(third), Verdict::Flooding(FLOOD_SECONDS));
        // A quiet second ends it.
        let quiet = third + Duration::from_secs(1);
        assert_eq!(cap.tick(quiet), Verdict::Within);
    }

    #[test]
    fn the_per_call_cap_holds_below_the_per_second_one() {
        let start = Instant::now();
        let mut cap = OutputCap::new("test", None, start);
        let line = "y\n".repeat(usize::try_from(LINES_PER_SECOND).unwrap() - 1);
        let mut now = start;
        for _ in 0..10 {
            cap.feed(Stream::Stderr, line.as_bytes(), Some(7), now);
            now += Duration::from_secs(1);
        }
        assert_eq!(cap.totals.0, u64::from(LINES_PER_CALL));
        // A long line is cut, not kept whole.
        let long = vec![b'z'; LINE_BYTES * 3];
        cap.feed(Stream::Stdout, &long, Some(8), now);
        assert_eq!(cap.totals.0, u64::from(LINES_PER_CALL) + 1);
    }
}
