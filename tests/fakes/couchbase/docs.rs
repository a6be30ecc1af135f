//! The documents the fake holds, by bucket, collection and key, with what a Couchbase data node
//! keeps beside each: its CAS, flags, datatype and expiry. The KV operations here follow the
//! memcached binary protocol's rules as Couchbase Server applies them (status codes of
//! `kv_engine`'s `status.h`):
//! - GET of a missing or expired key: KEY_ENOENT (0x01);
//! - SET (the SDK's upsert) stores whatever is there; with a CAS, the key must exist with that
//!   CAS: KEY_ENOENT when it does not exist, KEY_EEXISTS (0x02) when its CAS differs;
//! - ADD (insert) on an existing key: KEY_EEXISTS;
//! - REPLACE and DELETE: KEY_ENOENT on a missing key, KEY_EEXISTS on a CAS mismatch;
//! - TOUCH sets a new expiry (and CAS) of an existing key.
//!
//! Every mutation gets a new CAS, greater than any before. An expiry of up to 30 days is
//! relative (seconds from now), a larger one is an absolute Unix time, 0 is none.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// KEY_ENOENT.
pub(super) const ST_KEY_NOT_FOUND: u16 = 0x01;
/// KEY_EEXISTS: the key exists (ADD), or its CAS is not the one given.
pub(super) const ST_KEY_EXISTS: u16 = 0x02;

/// Where a document lives: bucket, collection id, key.
type DocKey = (String, u32, Vec<u8>);

/// One stored document.
#[derive(Debug, Clone)]
pub struct StoredDoc {
    /// Its body, as sent.
    pub value: Vec<u8>,
    /// The datatype it was sent with (0x01: JSON).
    pub datatype: u8,
    /// The client's flags (the SDK's transcoder writes its format there).
    pub flags: u32,
    /// Its CAS.
    pub cas: u64,
    expires: Option<Instant>,
}

impl StoredDoc {
    fn live(&self, now: Instant) -> bool {
        self.expires.is_none_or(|e| now < e)
    }
}

/// A mutation as the KV protocol carries it.
pub(super) struct Mutation<'a> {
    pub bucket: &'a str,
    pub collection: u32,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub datatype: u8,
    pub flags: u32,
    /// As sent: seconds, 0 for none.
    pub expiry: u32,
    /// 0: any.
    pub cas: u64,
}

/// The documents, and the CAS clock.
pub(super) struct Docs {
    docs: Mutex<HashMap<DocKey, StoredDoc>>,
    last_cas: Mutex<u64>,
    /// Bumped by every change: what was read of the documents before is current while it holds.
    version: std::sync::atomic::AtomicU64,
    /// How far the Search service's indexes trail the data (a real one indexes a mutation some
    /// time after it is acknowledged): 0 for at once.
    lag: Mutex<Duration>,
    /// While there is a lag: each changed key's value before its last change, and when that
    /// change was made (the index shows the value before until the lag has passed).
    before: Mutex<HashMap<DocKey, (Option<StoredDoc>, Instant)>>,
}

impl Default for Docs {
    fn default() -> Self {
        Docs {
            docs: Mutex::default(),
            last_cas: Mutex::new(0),
            version: Default::default(),
            lag: Mutex::new(Duration::ZERO),
            before: Mutex::default(),
        }
    }
}

/// How an operation may treat what is already there.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Store {
    /// SET: anything (with a CAS: that document).
    Set,
    /// ADD: nothing.
    Add,
    /// REPLACE: a document (with a CAS: that one).
    Replace,
}

impl Docs {
    /// A CAS greater than every one before, like a data node's hybrid logical clock (nanoseconds
    /// since the epoch, bumped when two mutations fall in one tick).
    /// The documents' version: it changes with every write.
    pub(super) fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Makes the Search service trail the data by `lag`.
    pub(super) fn set_lag(&self, lag: Duration) {
        *self.lag.lock() = lag;
        self.before.lock().clear();
    }

    /// The index trails the data.
    pub(super) fn lagging(&self) -> bool {
        !self.lag.lock().is_zero()
    }

    /// Remembers `k`'s value before a change, while the index trails the data.
    fn remember(&self, k: &DocKey, previous: Option<&StoredDoc>, now: Instant) {
        if self.lagging() {
            self.before.lock().insert(k.clone(), (previous.filter(|d| d.live(now)).cloned(), now));
        }
    }

    fn next_cas(&self) -> u64 {
        self.version.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let mut last = self.last_cas.lock();
        *last = now.max(*last + 1);
        *last
    }

    /// GET: the live document, or KEY_ENOENT.
    pub(super) fn get(&self, bucket: &str, collection: u32, key: &[u8]) -> Result<StoredDoc, u16> {
        let now = Instant::now();
        let mut docs = self.docs.lock();
        let k = (bucket.to_string(), collection, key.to_vec());
        match docs.get(&k) {
            Some(d) if d.live(now) => Ok(d.clone()),
            Some(_) => {
                docs.remove(&k);
                Err(ST_KEY_NOT_FOUND)
            }
            None => Err(ST_KEY_NOT_FOUND),
        }
    }

    /// SET, ADD or REPLACE: the new CAS, or the status refusing it.
    pub(super) fn store(&self, how: Store, m: &Mutation<'_>) -> Result<u64, u16> {
        let now = Instant::now();
        let mut docs = self.docs.lock();
        let k = (m.bucket.to_string(), m.collection, m.key.to_vec());
        let existing = docs.get(&k).filter(|d| d.live(now)).map(|d| d.cas);
        match (how, existing) {
            (Store::Add, Some(_)) => return Err(ST_KEY_EXISTS),
            (Store::Replace, None) => return Err(ST_KEY_NOT_FOUND),
            (Store::Set, None) if m.cas != 0 => return Err(ST_KEY_NOT_FOUND),
            (Store::Set | Store::Replace, Some(cas)) if m.cas != 0 && m.cas != cas => return Err(ST_KEY_EXISTS),
            _ => {}
        }
        self.remember(&k, docs.get(&k), now);
        let cas = self.next_cas();
        let doc = StoredDoc {
            value: m.value.to_vec(),
            datatype: m.datatype,
            flags: m.flags,
            cas,
            expires: expiry_instant(m.expiry, now),
        };
        docs.insert(k, doc);
        Ok(cas)
    }

    /// DELETE: the tombstone's CAS, or the status refusing it.
    pub(super) fn delete(&self, bucket: &str, collection: u32, key: &[u8], cas: u64) -> Result<u64, u16> {
        let now = Instant::now();
        let mut docs = self.docs.lock();
        let k = (bucket.to_string(), collection, key.to_vec());
        match docs.get(&k).filter(|d| d.live(now)) {
            None => return Err(ST_KEY_NOT_FOUND),
            Some(d) if cas != 0 && d.cas != cas => return Err(ST_KEY_EXISTS),
            Some(_) => {}
        }
        self.remember(&k, docs.get(&k), now);
        docs.remove(&k);
        Ok(self.next_cas())
    }

    /// TOUCH: a new expiry for a live document; its new CAS.
    pub(super) fn touch(&self, bucket: &str, collection: u32, key: &[u8], expiry: u32) -> Result<u64, u16> {
        let now = Instant::now();
        let cas = self.next_cas();
        let mut docs = self.docs.lock();
        let k = (bucket.to_string(), collection, key.to_vec());
        match docs.get_mut(&k).filter(|d| d.live(now)) {
            None => Err(ST_KEY_NOT_FOUND),
            Some(d) => {
                d.expires = expiry_instant(expiry, now);
                d.cas = cas;
                Ok(cas)
            }
        }
    }

    /// Every live document of one collection, by key (for tests, and the search index over it).
    pub(super) fn all(&self, bucket: &str, collection: u32) -> Vec<(String, StoredDoc)> {
        let now = Instant::now();
        let docs = self.docs.lock();
        let mut out: Vec<(String, StoredDoc)> = docs
            .iter()
            .filter(|((b, c, _), d)| b == bucket && *c == collection && d.live(now))
            .map(|((_, _, k), d)| (String::from_utf8_lossy(k).into_owned(), d.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The documents of one collection as the Search service has indexed them: each changed
    /// within the lag as it was before that change.
    pub(super) fn indexed(&self, bucket: &str, collection: u32) -> Vec<(String, StoredDoc)> {
        let now = Instant::now();
        let lag = *self.lag.lock();
        let mut by_key: HashMap<String, StoredDoc> = self.all(bucket, collection).into_iter().collect();
        if !lag.is_zero() {
            let mut before = self.before.lock();
            before.retain(|_, (_, at)| now.duration_since(*at) < lag);
            for ((b, c, k), (previous, _)) in before.iter() {
                if b != bucket || *c != collection {
                    continue;
                }
                let key = String::from_utf8_lossy(k).into_owned();
                match previous {
                    Some(d) => by_key.insert(key, d.clone()),
                    None => by_key.remove(&key),
                };
            }
        }
        let mut out: Vec<(String, StoredDoc)> = by_key.into_iter().collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// When an expiry as the protocol sends it ends: up to 30 days it counts from now, beyond it is
/// a Unix time; 0 is never.
fn expiry_instant(expiry: u32, now: Instant) -> Option<Instant> {
    const THIRTY_DAYS: u32 = 30 * 24 * 3600;
    match expiry {
        0 => None,
        s if s <= THIRTY_DAYS => Some(now + Duration::from_secs(u64::from(s))),
        at => {
            let unix_now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
            Some(now + Duration::from_secs(u64::from(at).saturating_sub(unix_now)))
        }
    }
}
