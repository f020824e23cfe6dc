//! The ledger's metrics (`pmm-metrics`, chat's `/metrics`): one pass over its events as
//! stored, hashing on worker threads, folding [`crate::metrics::MetricsFold`] and the
//! adaptive loop's log, with the chain checked on the way (broken links and hash mismatches
//! are metrics too).

use crate::chain::Verifier;
use crate::interchange::{self, Input, Item};
use crate::metrics::{LedgerMetrics, MetricsFold};
use std::time::Instant;

/// Computes the metrics of the ledger at `path` (a file, an export, or a PostgreSQL URL: read
/// through its own connection); `progress` gets millionths of the way.
pub fn compute(path: &std::path::Path, progress: &dyn Fn(u64)) -> crate::Result<LedgerMetrics> {
    let started = Instant::now();
    let mut fold = MetricsFold::default();
    let mut adapt = crate::projection::adapt::AdaptLog::default();
    let mut verifier = Verifier::new(vec![]).eager();
    let mut findings = Vec::new();
    let mut n = 0u64;
    interchange::read_with(
        &Input::new(path),
        progress,
        &interchange::digest,
        &mut |item, digest| {
            if let (Item::Event(r), Some(d)) = (item, digest) {
                n += 1;
                verifier.check_computed(&r.event, d, &mut findings);
                findings.clear();
                fold.add(&r.event);
                adapt.apply(&r.event);
            }
            Ok(true)
        },
    )?;
    let elapsed = started.elapsed();
    let s = verifier.finish(&mut findings);
    let mut m = fold.finish(s.broken_links, s.hash_mismatches);
    m.adaptation = Some(adapt.summary());
    m.replay_ms_per_event = Some(if n == 0 {
        0.0
    } else {
        elapsed.as_secs_f64() * 1000.0 / n as f64
    });
    Ok(m)
}
