//! What a host's cache asks of the server beyond the event log ([`super::super::replica`]):
//! the head row to check against the events, the erasure event that must name a blank row,
//! and a connection made again after the server closed it.

use super::{jitter, PgLog, RECONNECT_FOR};
use crate::Result;
use std::time::Instant;

impl PgLog {
    /// Connects again when the server has closed this connection (it restarted, failed over,
    /// or ended an idle session), retrying with jittered back-off for up to
    /// [`RECONNECT_FOR`]: a long-lived program (`pmm-tick --every`, `pmm-replay --follow`,
    /// `pmm-turn` reading stdin) goes on once the server is back. Whether it connected again;
    /// an open connection is left alone.
    pub(crate) fn revive(&mut self) -> Result<bool> {
        if !self.client.get_mut().is_closed() {
            return Ok(false);
        }
        let started = Instant::now();
        let mut wait = 100u64;
        loop {
            match PgLog::connect(&self.given, self.ctx.busy_ms, self.read_only) {
                Ok(fresh) => {
                    let isolation = self.isolation;
                    *self = PgLog {
                        isolation,
                        retries: self.retries,
                        linked_here: self.linked_here,
                        ..fresh
                    };
                    return Ok(true);
                }
                Err(e) if started.elapsed() >= RECONNECT_FOR => return Err(e),
                Err(_) => {
                    std::thread::sleep(jitter(wait));
                    wait = (wait * 2).min(2_000);
                }
            }
        }
    }

    /// The head row every append locks and moves: `(id, hash)` (0 and null before the first).
    pub(crate) fn head_row(&self) -> Result<(i64, Option<String>)> {
        let row = self
            .client
            .borrow_mut()
            .query_one("SELECT id, hash FROM pmm_head", &[])
            .map_err(|e| self.err(e))?;
        Ok((row.get(0), row.get(1)))
    }

    /// The meta of the first `erasure` event after event `id` that names it, if there is one.
    pub(crate) fn erasure_naming(&self, id: i64) -> Result<Option<String>> {
        let row = self
            .client
            .borrow_mut()
            .query_opt(
                "SELECT meta FROM events WHERE kind = 'erasure' AND id > $1 AND strpos(meta, $2) > 0 ORDER BY id LIMIT 1",
                &[&id, &format!("\"erased_id\":{id},")],
            )
            .map_err(|e| self.err(e))?;
        Ok(row.map(|r| r.get(0)))
    }
}
