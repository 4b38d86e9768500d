//! Everything `tracing` writes in a test binary, captured for assertions.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// The binary's formatted `tracing` output, at TRACE level (so the HTTP
/// stack's own events are seen too).
///
/// One global subscriber per test binary: a scoped `set_default` loses
/// events when another test thread registers the same callsite first (its
/// interest is cached as "never" against the global no-op subscriber), so
/// tests share this capture and look for their own, unique fields in it.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// The capture, installed as the global subscriber on first use.
    pub fn global() -> &'static Logs {
        static LOGS: OnceLock<Logs> = OnceLock::new();
        LOGS.get_or_init(|| {
            use tracing_subscriber::util::SubscriberInitExt;
            let logs = Logs::default();
            tracing_subscriber::fmt()
                .with_writer({
                    let logs = logs.clone();
                    move || logs.clone()
                })
                .with_max_level(tracing_subscriber::filter::LevelFilter::TRACE)
                .with_ansi(false)
                .finish()
                .try_init()
                .expect("no other code in this test binary installs a subscriber");
            logs
        })
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}
