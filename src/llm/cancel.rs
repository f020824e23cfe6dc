//! Cancelling a model call: a flag the adapters check while they wait (between the chunks of a
//! streamed answer, every few milliseconds while a request or a cmd program is under way), and
//! SIGINT/SIGTERM handlers that raise it while a call is armed.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a waiting adapter looks at the flag: short enough that Ctrl-C feels immediate.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// A cancellation flag shared between whoever asks a model and whoever may want to stop it.
/// Clones share the flag.
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    /// The signal that cancelled (any positive number when cancelled by hand), 0 while not.
    signal: Arc<AtomicI32>,
    /// True while signals cancel instead of ending the process (see [`Cancel::arm`]).
    armed: Arc<AtomicBool>,
}

impl Cancel {
    /// A flag that is not raised.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Raises the flag as if `signal` had arrived (the first reason is kept).
    pub fn cancel(&self, signal: i32) {
        let _ = self
            .signal
            .compare_exchange(0, signal.max(1), Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The signal (or number) that raised the flag, if it is raised.
    pub fn signal(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }

    /// True once the flag is raised.
    pub fn is_cancelled(&self) -> bool {
        self.signal().is_some()
    }

    /// Lowers the flag (an interactive session does so before its next call).
    pub fn reset(&self) {
        self.signal.store(0, Ordering::SeqCst);
    }

    /// The [`LlmError::Interrupted`](super::LlmError::Interrupted) for a raised flag.
    pub(crate) fn check(&self, provider: &str, endpoint: &str) -> Result<(), super::LlmError> {
        match self.signal() {
            None => Ok(()),
            Some(signal) => Err(super::LlmError::Interrupted {
                provider: provider.to_string(),
                endpoint: endpoint.to_string(),
                signal,
            }),
        }
    }

    /// Installs SIGINT and SIGTERM handlers for this flag. While the flag is armed
    /// ([`Cancel::arm`]) the first signal raises it and a second one ends the process at once
    /// with status 128 + the signal; while it is not, a signal does what it always does (the
    /// process ends). Call it once per process.
    pub fn on_signals(&self) -> io::Result<()> {
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let (signal, armed) = (self.signal.clone(), self.armed.clone());
            let action = move || {
                if !armed.load(Ordering::SeqCst) {
                    let _ = signal_hook::low_level::emulate_default_handler(sig);
                    return;
                }
                if signal
                    .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    signal_hook::low_level::exit(128 + sig);
                }
            };
            // SAFETY: the action only touches atomics and calls async-signal-safe functions
            // (emulate_default_handler, which signal-hook itself uses in handlers, and _exit).
            unsafe { signal_hook::low_level::register(sig, action) }?;
        }
        Ok(())
    }

    /// Arms the flag until the guard is dropped: SIGINT and SIGTERM then raise it instead of
    /// ending the process.
    pub fn arm(&self) -> Armed {
        self.armed.store(true, Ordering::SeqCst);
        Armed {
            armed: self.armed.clone(),
        }
    }
}

/// Keeps a [`Cancel`] armed while it lives.
#[derive(Debug)]
pub struct Armed {
    armed: Arc<AtomicBool>,
}

impl Drop for Armed {
    fn drop(&mut self) {
        self.armed.store(false, Ordering::SeqCst);
    }
}

/// Where a streamed reply goes, piece by piece, as it arrives. Clones share the function.
#[derive(Clone)]
pub struct TextSink(Arc<dyn Fn(&str) + Send + Sync>);

impl TextSink {
    /// A sink calling `f` with each piece of text.
    pub fn new(f: impl Fn(&str) + Send + Sync + 'static) -> TextSink {
        TextSink(Arc::new(f))
    }

    /// Hands on one piece.
    pub fn send(&self, text: &str) {
        if !text.is_empty() {
            (self.0)(text);
        }
    }
}

impl std::fmt::Debug for TextSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TextSink")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_is_kept_until_reset() {
        let c = Cancel::new();
        assert!(!c.is_cancelled());
        c.clone().cancel(2);
        c.cancel(15);
        assert_eq!(c.signal(), Some(2));
        assert!(c.check("ollama", "").is_err());
        c.reset();
        assert_eq!(c.signal(), None);
        assert!(c.check("ollama", "").is_ok());
    }

    #[test]
    fn arming_lasts_as_long_as_the_guard() {
        let c = Cancel::new();
        {
            let _g = c.arm();
            assert!(c.armed.load(Ordering::SeqCst));
        }
        assert!(!c.armed.load(Ordering::SeqCst));
    }
}
