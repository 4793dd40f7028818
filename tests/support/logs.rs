//! Capturing what quorlock logs, for tests that check it.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Everything logged while the guard of [`capture_logs`] lives.
#[derive(Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// The log lines so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for CapturedLogs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures the events of this thread at `level` and above (without
/// colours) until the returned guard is dropped. Use a current-thread
/// runtime so that background tasks log into it too.
pub fn capture_logs(level: tracing::Level) -> (CapturedLogs, tracing::subscriber::DefaultGuard) {
    let captured = CapturedLogs::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}
