//! What a reply's markers cause, by the turn's rules, for a turn and a thinking tick alike:
//! claims checked and recorded, commitments opened and closed, the correction/delta
//! reflection and the `REF:`s it carries.

use super::{concepts, derive, meta, new_event, put, reference, Session};
use crate::canon;
use crate::claim::{self, ClaimContext};
use crate::event::{Kind, Source};
use crate::marker;
use crate::projection::mirror::{self, commitment_cid};
use crate::projection::state::Projections;
use crate::store::log::SessionTxn;
use serde_json::{json, Value};

/// The claim checker's view of the ledger. A database error while looking an event up is
/// kept and ends the turn's write ([`LedgerClaims::failure`]): it must never be recorded as a
/// claim that failed because the event "does not exist".
struct LedgerClaims<'a> {
    tx: &'a dyn SessionTxn,
    p: &'a Projections,
    error: std::cell::RefCell<Option<crate::Error>>,
}

impl LedgerClaims<'_> {
    /// The first database error a look-up met, if any.
    fn failure(self) -> Option<crate::Error> {
        self.error.into_inner()
    }
}

impl ClaimContext for LedgerClaims<'_> {
    fn event_exists(&self, id: i64) -> bool {
        if id < 1 {
            return false;
        }
        match self.tx.get(id) {
            Ok(found) => found.is_some(),
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e);
                false
            }
        }
    }
    fn commitment_is_open(&self, cid: &str) -> bool {
        self.p.mirror.open.contains_key(cid)
    }
    fn commitment_was_opened(&self, cid: &str) -> Option<bool> {
        Some(self.p.mirror.open.contains_key(cid) || self.p.mirror.closed.contains_key(cid))
    }
}

/// Claims, each on its own (a bad one fails only itself): the valid ones as `claim` events
/// bound to their type; the records of valid and failed claims.
pub(crate) fn append_claims(
    s: &mut Session<'_, '_>,
    markers: &marker::Markers,
) -> crate::Result<(Vec<Value>, Vec<claim::FailedClaim>)> {
    let ctx = LedgerClaims {
        tx: &*s.tx,
        p: s.p,
        error: std::cell::RefCell::new(None),
    };
    let (valid, failed) = claim::check_all(&markers.claims, &ctx);
    let valid: Vec<marker::ClaimMarker> = valid.into_iter().map(|l| l.value.clone()).collect();
    if let Some(e) = ctx.failure() {
        return Err(e);
    }
    let mut records = Vec::new();
    for c in &valid {
        let ce = s.put(
            Kind::Claim,
            claim::claim_content(c),
            meta(&[
                ("claim_type", c.claim_type.clone().into()),
                ("validated", true.into()),
            ]),
        )?;
        let bind = json!({"event_id": ce.id, "relation": "describes", "tokens": [c.claim_type]});
        s.put(
            Kind::ConceptBindEvent,
            canon::built(&bind),
            meta(&[("source", Source::AutoBinder.into())]),
        )?;
        records.push(json!({"type": c.claim_type, "data": c.data, "event": ce.id}));
    }
    Ok((records, failed))
}

/// A `commitment_open` per `COMMIT:` line, each followed by the binding of the turn's
/// concepts to its thread; the cids opened. `source` is the writer's `meta.source`
/// (`assistant` for a turn's reply, `autonomy_kernel` for a thinking tick's); the origin is
/// the model's either way.
pub(crate) fn append_opens(
    s: &mut Session<'_, '_>,
    markers: &marker::Markers,
    about: &[String],
    source: &str,
) -> crate::Result<Vec<String>> {
    let mut opened = Vec::new();
    for c in &markers.commits {
        let cid = commitment_cid(&c.value);
        let score = derive::impact_score(s.p, &cid, s.head_id()?);
        let ev = mirror::commitment_open(&c.value, score, Source::Assistant.as_str(), source);
        let open = s.put(ev.kind, ev.content, ev.meta)?;
        concepts::bind_thread(s, &cid, open.id, about, Source::Loop)?;
        opened.push(cid);
    }
    Ok(opened)
}

/// A `commitment_close` per `CLOSE:` line naming an open commitment; the cids closed.
/// `source` as for [`append_opens`].
pub(crate) fn append_closes(
    s: &mut Session<'_, '_>,
    markers: &marker::Markers,
    source: &str,
) -> crate::Result<Vec<String>> {
    let mut closed = Vec::new();
    for c in &markers.closes {
        if !s.p.mirror.open.contains_key(&c.value) {
            continue;
        }
        let m = meta(&[
            ("cid", c.value.clone().into()),
            ("origin", Source::Assistant.into()),
            ("source", source.into()),
        ]);
        s.put(Kind::CommitmentClose, mirror::close_content(&c.value), m)?;
        closed.push(c.value.clone());
    }
    Ok(closed)
}

/// The correction/delta reflection about the reply `assistant_id` (what its markers did,
/// its `REFLECT:`), and the `REF:`s it carries.
pub(crate) fn append_delta_reflection(
    s: &mut Session<'_, '_>,
    markers: &marker::Markers,
    failed: &[claim::FailedClaim],
    opened: &[String],
    closed: &[String],
    assistant_id: i64,
) -> crate::Result<()> {
    let reflect = markers.reflect.as_ref().and_then(|r| r.value.as_ref().ok());
    if let Some(text) = claim::delta_text(failed, opened, closed, reflect) {
        s.put(
            Kind::Reflection,
            text.as_str(),
            meta(&[("about_event", assistant_id.into())]),
        )?;
        for r in marker::parse(&text).refs {
            append_ref(s, &r.value)?;
        }
    }
    Ok(())
}

pub(crate) fn append_ref(s: &mut Session<'_, '_>, target: &str) -> crate::Result<()> {
    let Some(req) = claim::parse_ref(target) else {
        return Ok(());
    };
    let outcome = claim::RefOutcome::from(reference::resolve(&req));
    let ev = new_event(Kind::InterLedgerRef, req.content(), outcome.meta_map())?;
    put(s.tx, s.p, s.events, ev, s.clock)?;
    Ok(())
}
