//! Who may hold a connection to `pmm-mcp --http`, and what bodies may hold in memory.
//!
//! A connection costs a descriptor and a task, so their number is bounded; but a bound alone
//! lets anyone who can open sockets fill it without a token (issue 44, N6: 256 idle sockets,
//! reopened as they were closed, answered everyone else with 503). So a connection is
//! *unauthenticated* until one of its requests passes the token check, and the two kinds have
//! budgets of their own:
//!
//! - authenticated connections: at most [`Budgets::authenticated`] (503 beyond);
//! - unauthenticated ones: at most [`Budgets::unauthenticated`] in all and
//!   [`Budgets::per_peer`] from one address (loopback excepted: a proxy in front speaks for
//!   every client from there). A new one is never refused for want of room: the oldest idle
//!   unauthenticated connection of the same address (over its share), or of the address
//!   holding the most, is closed to make it. A client that sends its request at once (every
//!   real one) is authenticated long before a flood has cycled through the budget; sockets
//!   that send nothing only ever push each other out. Only when every unauthenticated
//!   connection is in the middle of a request is a new one refused.
//!
//! Request bodies are read whole before anything parses them, so what they hold at once is
//! bounded too ([`BodyBudget`]): the first [`FREE_BODY_BYTES`] of each body are free (a
//! JSON-RPC message is rarely more), the rest of every body being read counts against one
//! budget, and a body that does not fit is refused (503) instead of waited for.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The connection budgets.
#[derive(Debug, Clone, Copy)]
pub struct Budgets {
    /// Connections that have presented a valid token (or any, under `--no-auth`).
    pub authenticated: usize,
    /// Connections that have not (yet): new ones, TLS handshakes, 401s, the metadata.
    pub unauthenticated: usize,
    /// Unauthenticated connections from one address other than loopback.
    pub per_peer: usize,
}

struct Waiting {
    peer: IpAddr,
    /// A request of it is being answered: it is not closed under it.
    busy: bool,
    evict: Arc<Notify>,
}

#[derive(Default)]
struct Book {
    /// Unauthenticated connections, oldest first (by the number they were admitted with).
    waiting: BTreeMap<u64, Waiting>,
    per_peer: HashMap<IpAddr, usize>,
    authenticated: usize,
    next: u64,
}

impl Book {
    fn forget(&mut self, id: u64) -> bool {
        let Some(w) = self.waiting.remove(&id) else {
            return false;
        };
        if let Some(n) = self.per_peer.get_mut(&w.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&w.peer);
            }
        }
        true
    }

    /// The oldest idle unauthenticated connection of `peer`, closed; false when it has none.
    fn evict_oldest_of(&mut self, peer: IpAddr) -> bool {
        let victim = self
            .waiting
            .iter()
            .find(|(_, w)| w.peer == peer && !w.busy)
            .map(|(id, w)| (*id, w.evict.clone()));
        match victim {
            Some((id, evict)) => {
                self.forget(id);
                evict.notify_one();
                true
            }
            None => false,
        }
    }

    /// Room for one more unauthenticated connection from `peer`, made by closing idle ones.
    fn make_room(&mut self, peer: IpAddr, b: &Budgets) -> bool {
        if !peer.is_loopback()
            && self.per_peer.get(&peer).copied().unwrap_or(0) >= b.per_peer
            && !self.evict_oldest_of(peer)
        {
            return false;
        }
        if self.waiting.len() < b.unauthenticated {
            return true;
        }
        // The address holding the most gives one up first; then anyone's oldest idle one.
        let mut peers: Vec<(usize, IpAddr)> = self.per_peer.iter().map(|(p, n)| (*n, *p)).collect();
        peers.sort_by_key(|p| std::cmp::Reverse(p.0));
        peers.into_iter().any(|(_, p)| self.evict_oldest_of(p))
    }
}

/// The connection budgets of one server.
pub struct Gate {
    budgets: Budgets,
    book: Mutex<Book>,
}

/// What the gate decided for one request of a connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Promotion {
    /// The connection counts as authenticated (now or already).
    Done,
    /// Every authenticated connection is taken: answer 503.
    Full,
}

impl Gate {
    /// A gate with these budgets.
    pub fn new(budgets: Budgets) -> Arc<Gate> {
        Arc::new(Gate {
            budgets,
            book: Mutex::new(Book::default()),
        })
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection from `peer`, unauthenticated; `None` when no room can be made (every
    /// unauthenticated connection is being answered).
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Ticket> {
        let mut book = self.book();
        if !book.make_room(peer, &self.budgets) {
            return None;
        }
        let id = book.next;
        book.next += 1;
        let evict = Arc::new(Notify::new());
        book.waiting.insert(
            id,
            Waiting {
                peer,
                busy: false,
                evict: evict.clone(),
            },
        );
        *book.per_peer.entry(peer).or_insert(0) += 1;
        Some(Ticket {
            gate: self.clone(),
            id,
            evict,
            authenticated: AtomicBool::new(false),
        })
    }

    /// How many connections are held: (authenticated, unauthenticated).
    pub fn held(&self) -> (usize, usize) {
        let book = self.book();
        (book.authenticated, book.waiting.len())
    }
}

/// One admitted connection's place; given back when it is dropped.
pub struct Ticket {
    gate: Arc<Gate>,
    id: u64,
    evict: Arc<Notify>,
    authenticated: AtomicBool,
}

impl Ticket {
    /// Completes when the gate closed this connection to make room for a newer one.
    pub async fn evicted(&self) {
        self.evict.notified().await
    }

    /// Whether a request of this connection presented a valid token.
    pub fn authenticated(&self) -> bool {
        self.authenticated.load(Ordering::SeqCst)
    }

    /// A request of this connection passed the token check: it moves to the authenticated
    /// budget, if that has room.
    pub fn promote(&self) -> Promotion {
        if self.authenticated() {
            return Promotion::Done;
        }
        let mut book = self.gate.book();
        if book.authenticated >= self.gate.budgets.authenticated {
            return Promotion::Full;
        }
        book.forget(self.id);
        book.authenticated += 1;
        self.authenticated.store(true, Ordering::SeqCst);
        Promotion::Done
    }

    /// Marks a request of this connection as being answered until the guard is dropped: an
    /// unauthenticated connection is not closed under a request.
    pub fn serving(self: &Arc<Self>) -> Serving {
        self.set_busy(true);
        Serving(self.clone())
    }

    fn set_busy(&self, busy: bool) {
        if let Some(w) = self.gate.book().waiting.get_mut(&self.id) {
            w.busy = busy;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut book = self.gate.book();
        if self.authenticated() {
            book.authenticated -= 1;
        } else {
            book.forget(self.id);
        }
    }
}

/// A request being answered (see [`Ticket::serving`]).
pub struct Serving(Arc<Ticket>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.set_busy(false);
    }
}

/// The bytes of a body that never count against the [`BodyBudget`]: with at most a few
/// hundred connections, these are a few MiB in all.
pub const FREE_BODY_BYTES: usize = 64 << 10;

/// The memory all request bodies being read may hold at once, beyond their first
/// [`FREE_BODY_BYTES`].
pub struct BodyBudget(Arc<Semaphore>, usize);

impl BodyBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> BodyBudget {
        let bytes = bytes.min(Semaphore::MAX_PERMITS);
        BodyBudget(Arc::new(Semaphore::new(bytes)), bytes)
    }

    /// An empty share, to grow as a body does.
    pub fn share(&self) -> BodyShare {
        BodyShare {
            budget: self.0.clone(),
            total: self.1,
            held: None,
            bytes: 0,
        }
    }
}

/// What one body holds of the [`BodyBudget`]; given back when dropped, and when no body holds
/// any more, the memory the bodies had is given back to the system (`give_back`).
pub struct BodyShare {
    budget: Arc<Semaphore>,
    total: usize,
    held: Option<OwnedSemaphorePermit>,
    bytes: usize,
}

impl BodyShare {
    /// Grows the share to cover a body of `len` bytes; false when the budget has no room.
    pub fn cover(&mut self, len: usize) -> bool {
        let need = len.saturating_sub(FREE_BODY_BYTES);
        if need <= self.bytes {
            return true;
        }
        let Ok(more) = u32::try_from(need - self.bytes) else {
            return false;
        };
        let Ok(permit) = self.budget.clone().try_acquire_many_owned(more) else {
            return false;
        };
        match &mut self.held {
            Some(h) => h.merge(permit),
            None => self.held = Some(permit),
        }
        self.bytes = need;
        true
    }
}

impl Drop for BodyShare {
    fn drop(&mut self) {
        let Some(permit) = self.held.take() else {
            return;
        };
        drop(permit);
        if self.budget.available_permits() == self.total {
            give_back();
        }
    }
}

// mimalloc, the programs' allocator (`crate::global_allocator!`), keeps freed memory for reuse
// and returns it to the system only when a later allocation happens to purge it: 200 stalled
// bodies left a server at 840 MB after they closed. Its `mi_collect` (in every binary: the
// library links mimalloc) purges it now.
extern "C" {
    fn mi_collect(force: bool);
}

/// Returns the memory freed since to the system (a forced `mi_collect`: this thread's pages
/// and, program wide, the allocator's arenas). Called when the last large body is dropped,
/// not for each.
fn give_back() {
    // SAFETY: mi_collect takes no pointer and may be called from any thread at any time; when
    // mimalloc is not the global allocator it collects its own, empty, heap.
    unsafe { mi_collect(true) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    #[test]
    fn a_flood_of_idle_connections_pushes_out_its_own_oldest_and_never_the_authenticated() {
        let gate = Gate::new(Budgets {
            authenticated: 2,
            unauthenticated: 4,
            per_peer: 3,
        });
        let mut flood: Vec<Arc<Ticket>> = vec![];
        for _ in 0..3 {
            flood.push(Arc::new(gate.admit(ip(1)).unwrap()));
        }
        let other = Arc::new(gate.admit(ip(2)).unwrap());
        // Over its share: the flood's oldest goes, the other address's stays.
        flood.push(Arc::new(gate.admit(ip(1)).unwrap()));
        assert_eq!(gate.held(), (0, 4));
        let _busy = flood[1].serving();
        assert_eq!(other.promote(), Promotion::Done);
        assert_eq!(gate.held(), (1, 3));
        // The pool is not full now, but the flood is at its share: its oldest idle one goes
        // (flood[1] is busy, so flood[2]).
        let newest = Arc::new(gate.admit(ip(1)).unwrap());
        assert_eq!(gate.held(), (1, 3));
        assert_eq!(newest.promote(), Promotion::Done);
        let third = gate.admit(ip(3)).unwrap();
        assert_eq!(third.promote(), Promotion::Full);
        drop(other);
        assert_eq!(third.promote(), Promotion::Done);
        assert_eq!(gate.held(), (2, 2));
    }

    #[test]
    fn with_every_unauthenticated_connection_busy_a_new_one_is_refused() {
        let gate = Gate::new(Budgets {
            authenticated: 1,
            unauthenticated: 2,
            per_peer: 2,
        });
        let a = Arc::new(gate.admit(ip(1)).unwrap());
        let b = Arc::new(gate.admit(ip(2)).unwrap());
        let (_x, _y) = (a.serving(), b.serving());
        assert!(gate.admit(ip(3)).is_none());
    }

    #[test]
    fn bodies_share_one_budget_beyond_their_free_bytes() {
        let budget = BodyBudget::new(100 << 10);
        let mut a = budget.share();
        assert!(a.cover(FREE_BODY_BYTES));
        assert!(a.cover(FREE_BODY_BYTES + (60 << 10)));
        let mut b = budget.share();
        assert!(b.cover(FREE_BODY_BYTES + (40 << 10)));
        assert!(!b.cover(FREE_BODY_BYTES + (41 << 10)));
        drop(a);
        assert!(b.cover(FREE_BODY_BYTES + (100 << 10)));
    }
}
