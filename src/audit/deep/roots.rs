//! `checkpoint_manifest`: the root hash of the prefix it names (from the hasher's kept states,
//! or deferred to the second pass), its `covers` and its `up_to_id`.

use super::*;

impl DeepChecker {
    /// A `checkpoint_manifest`: its root, its covers and its `up_to_id`.
    pub(super) fn check_manifest(
        &mut self,
        ev: &Event,
        _: Option<&Map<String, Value>>,
        out: &mut Vec<Finding>,
    ) {
        self.check_root(ev, out);
        self.check_covers(ev, out);
    }

    pub(super) fn check_covers(&mut self, ev: &Event, out: &mut Vec<Finding>) {
        let Ok(Value::Object(c)) = serde_json::from_str::<Value>(&ev.content) else {
            return; // counted as unresolved by the root check
        };
        self.counts.manifest_covers += 1;
        let expected = Value::from(MANIFEST_COVERS.to_vec());
        let covers = c.get("covers").cloned().unwrap_or(Value::Null);
        if covers != expected {
            self.emit(
                out,
                ev.id,
                mismatch("checkpoint_manifest.covers", expected, covers),
            );
        }
        let up_to = c.get("up_to_id").cloned().unwrap_or(Value::Null);
        if !up_to.as_i64().is_some_and(|u| u >= 0 && u < ev.id) {
            let p = mismatch(
                "checkpoint_manifest.up_to_id",
                format!("an id below {}", ev.id).into(),
                up_to,
            );
            self.emit(out, ev.id, p);
        }
    }

    /// The root of the prefix `..=up_to` from the state, if it is still there.
    pub(super) fn root_at(&self, up_to: i64) -> Option<Digest> {
        if let Ok(i) = self.summary_roots.binary_search_by_key(&up_to, |(k, _)| *k) {
            return self.summary_roots.get(i).map(|(_, s)| s.root());
        }
        let n = self.roots.partition_point(|(k, _)| *k <= up_to);
        if n == 0 {
            return self.roots_complete.then(|| RootHasher::new().root());
        }
        self.roots.get(n - 1).map(|(_, s)| s.root())
    }

    pub(super) fn check_root(&mut self, ev: &Event, out: &mut Vec<Finding>) {
        let content: Option<Map<String, Value>> = serde_json::from_str(&ev.content).ok();
        let Some((up_to, found)) = content.as_ref().and_then(|c| {
            Some((
                c.get("up_to_id")?.as_i64()?,
                c.get("root_hash").cloned().unwrap_or(Value::Null),
            ))
        }) else {
            self.counts.unresolved += 1;
            return;
        };
        match (up_to < ev.id).then(|| self.root_at(up_to)).flatten() {
            Some(root) => {
                self.counts.checkpoint_roots += 1;
                self.compare_root(out, ev.id, root, found);
            }
            None => self.pending_roots.push(PendingRoot {
                id: ev.id,
                up_to,
                found,
            }),
        }
    }

    pub(super) fn compare_root(
        &mut self,
        out: &mut Vec<Finding>,
        id: i64,
        root: Digest,
        found: Value,
    ) {
        let expected = root.to_string();
        if found.as_str() != Some(expected.as_str()) {
            let p = mismatch("checkpoint_manifest.root_hash", expected.into(), found);
            self.emit(out, id, p);
        }
    }
}
