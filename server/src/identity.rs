//! Who may act as which client. A client binds its slot to a token it chose, at Join (or at
//! Claim, when it starts without a name), and every later call must carry that token; under
//! mutual TLS its certificate must also name the slot (or be the pool certificate).
//!
//! The client chooses the token rather than the server so that a Join whose reply was lost can
//! be repeated: the same token gets the same slot, any other token is refused. Only a hash of
//! each token is kept.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use flint_common::{ClientId, FlintError, Result};
use flint_shell::tls::POOL_IDENTITY;
use sha2::{Digest, Sha256};

/// Tokens are 32 to 128 hex digits (128 to 512 bits).
const TOKEN_DIGITS: std::ops::RangeInclusive<usize> = 32..=128;

/// The name a caller proved with its TLS client certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// No mutual TLS on this server: only the token identifies a caller.
    Anonymous,
    /// The certificate's common name (`*` for the pool certificate).
    Certified(String),
    /// Mutual TLS is required, but the connection carries no usable certificate name.
    Uncertified,
}

/// Who holds a slot, as the results record it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holder {
    /// The host the client said it runs on (its container's hostname), at most 255 bytes.
    pub host: String,
    /// The common name of its certificate, under mutual TLS.
    pub certificate: Option<String>,
}

impl Holder {
    pub fn new(host: &str, peer: &Peer) -> Self {
        let mut end = host.len().min(255);
        while !host.is_char_boundary(end) {
            end -= 1;
        }
        Holder {
            host: host[..end].to_string(),
            certificate: match peer {
                Peer::Certified(cn) => Some(cn.clone()),
                _ => None,
            },
        }
    }
}

/// How a slot is bound the first time; later calls need only the token that bound it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Only by a client certificate that names the slot: a run that issued no enrollment
    /// secrets and was not opened refuses the pool certificate and bare tokens.
    Certificates,
    /// With one of the enrollment secrets the run issued (their hashes), each once, or by the
    /// slot's own certificate.
    Enrolled(BTreeSet<[u8; 32]>),
    /// By any caller (`--open-enrollment`, for a network whose every host is trusted).
    Open,
}

/// How long a slot claimed without a name (`--name auto`) stays its claimer's before the
/// claimer joins: a process that claims and dies must not keep the slot from the next one.
pub const CLAIM_LEASE: Duration = Duration::from_secs(120);

#[derive(Debug)]
pub struct Identities {
    /// Slot names by id (ids count from 1, in the experiment's order).
    names: Vec<String>,
    claims: BTreeMap<ClientId, ([u8; 32], Holder)>,
    /// When each slot bound by a Claim, or restored from the journal, was bound; a Join of
    /// the slot removes it.
    unjoined_since: BTreeMap<ClientId, Instant>,
    lease: Duration,
    admission: Admission,
    /// Each used secret's slot (a secret is spent once used, even if its claim lapses).
    enrolled: BTreeMap<[u8; 32], ClientId>,
    /// The secret that bound each slot as it is bound now, for the journal.
    slot_secret: BTreeMap<ClientId, [u8; 32]>,
}

impl Identities {
    pub fn new(names: Vec<String>) -> Self {
        Identities {
            names,
            claims: BTreeMap::new(),
            unjoined_since: BTreeMap::new(),
            lease: CLAIM_LEASE,
            admission: Admission::Certificates,
            enrolled: BTreeMap::new(),
            slot_secret: BTreeMap::new(),
        }
    }

    /// Binding a slot the first time takes one of these enrollment secrets (by hash), each once.
    pub fn with_enrollment(self, hashes: BTreeSet<[u8; 32]>) -> Self {
        self.with_admission(Admission::Enrolled(hashes))
    }

    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = admission;
        self
    }

    /// What binding `id` to `token` asks of `secret`: nothing in an open run, for the token
    /// that already holds the slot, or for the slot's own certificate; otherwise an issued
    /// secret no other slot used, where the run issued any. The secret's hash, to record once
    /// the slot is bound.
    pub fn check_enrollment(
        &self,
        id: ClientId,
        token: &str,
        secret: &str,
        peer: &Peer,
    ) -> Result<Option<[u8; 32]>> {
        let token = hash(token)?;
        let holds = self.claims.get(&id).is_some_and(|(h, _)| *h == token);
        let own_certificate =
            matches!(peer, Peer::Certified(cn) if Some(cn.as_str()) == self.name(id));
        if holds || own_certificate {
            return Ok(None);
        }
        let issued = match &self.admission {
            Admission::Open => return Ok(None),
            Admission::Certificates => return Err(FlintError::PermissionDenied(
                "this run binds a slot only to a client certificate that names it: a pool certificate or a bare token needs an enrollment secret, and the server was started with neither --enrollment nor --open-enrollment".into(),
            )),
            Admission::Enrolled(issued) => issued,
        };
        if secret.is_empty() {
            return Err(FlintError::Unauthenticated(
                "this run admits a new client only with an enrollment secret (flint client --enroll-secret or --enroll-dir, from flint certs --enroll)".into(),
            ));
        }
        let h = hash(secret).map_err(|_| {
            FlintError::PermissionDenied("the enrollment secret is not one this run issued".into())
        })?;
        if !issued.contains(&h) {
            return Err(FlintError::PermissionDenied(
                "the enrollment secret is not one this run issued".into(),
            ));
        }
        match self.enrolled.get(&h) {
            Some(&used) if used != id => Err(FlintError::PermissionDenied(
                "the enrollment secret was used already, by another slot".into(),
            )),
            _ => Ok(Some(h)),
        }
    }

    /// Records that `secret` (its hash, from [`check_enrollment`](Self::check_enrollment))
    /// enrolled `id`.
    pub fn enroll(&mut self, id: ClientId, secret: Option<[u8; 32]>) {
        if let Some(h) = secret {
            self.enrolled.insert(h, id);
            self.slot_secret.insert(id, h);
        }
    }

    /// The hash of the secret that enrolled `id` as it is bound now, for the journal.
    pub fn enrollment_of(&self, id: ClientId) -> Option<[u8; 32]> {
        self.slot_secret.get(&id).copied()
    }

    /// A claimed slot is free again once `lease` passed without its Join.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    fn name(&self, id: ClientId) -> Option<&str> {
        self.names
            .get((id as usize).checked_sub(1)?)
            .map(String::as_str)
    }

    /// Which slot a Join for `id` with `token` from `peer` may bind, without binding it yet
    /// (the Join may still be refused for its data).
    pub fn check_claim(&self, id: ClientId, token: &str, peer: &Peer) -> Result<()> {
        let hash = hash(token)?;
        let name = self
            .name(id)
            .ok_or_else(|| FlintError::UnknownClient(format!("unknown client id {id}")))?;
        certified_for(peer, name)?;
        // A client's own certificate is its identity: started again with a new token, it takes
        // its slot back. A pool certificate names no slot, so there the token decides.
        let own_certificate = matches!(peer, Peer::Certified(cn) if cn == name);
        match self.claims.get(&id) {
            Some((held, _)) if *held != hash && !own_certificate => {
                Err(FlintError::PermissionDenied(format!(
                    "client {name:?} is already held by another process"
                )))
            }
            _ => Ok(()),
        }
    }

    /// Binds `id` to `token` (after [`check_claim`](Self::check_claim) passed); whether that
    /// changed anything (a repeated Join from the same place does not).
    pub fn bind(&mut self, id: ClientId, token: &str, holder: Holder) -> Result<bool> {
        let hash = hash(token)?;
        let fresh = (hash, holder);
        let changed = self.claims.get(&id) != Some(&fresh);
        self.claims.insert(id, fresh);
        self.unjoined_since.remove(&id);
        Ok(changed)
    }

    /// A binding as the journal kept it (its token's hash), on a restart.
    pub fn restore(
        &mut self,
        id: ClientId,
        hash: [u8; 32],
        holder: Holder,
        now: Instant,
    ) -> Result<()> {
        if self.name(id).is_none() {
            return Err(FlintError::UnknownClient(format!("unknown client id {id}")));
        }
        self.claims.insert(id, (hash, holder));
        // Whether it had joined is the rounds' to say: its lease starts again now, and
        // lapses only if it has not (`claim_any` asks).
        self.unjoined_since.insert(id, now);
        Ok(())
    }

    /// The hash of the token holding `id`, and its holder.
    pub fn binding(&self, id: ClientId) -> Option<(&[u8; 32], &Holder)> {
        self.claims.get(&id).map(|(h, holder)| (h, holder))
    }

    pub fn holders(&self) -> impl Iterator<Item = (ClientId, &Holder)> {
        self.claims.iter().map(|(id, (_, h))| (*id, h))
    }

    /// The slot for a client without a name: the one this token already holds; under mutual
    /// TLS with a client's own certificate, that client's slot; otherwise the first unclaimed
    /// slot in id order (so slots go out by arrival, deterministically). The last field says
    /// whether the slot was newly bound.
    /// A slot claimed longer than the lease ago whose claimer has not joined (`joined` says
    /// which have) counts as unclaimed.
    pub fn claim_any(
        &mut self,
        token: &str,
        secret: &str,
        peer: &Peer,
        holder: Holder,
        joined: &dyn Fn(ClientId) -> bool,
        now: Instant,
    ) -> Result<(ClientId, String, bool)> {
        let hash = hash(token)?;
        if let Some((&id, _)) = self.claims.iter().find(|(_, (h, _))| *h == hash) {
            return Ok((id, self.name(id).unwrap_or_default().to_string(), false));
        }
        let id = match peer {
            Peer::Uncertified => return Err(uncertified()),
            Peer::Certified(cn) if cn != POOL_IDENTITY => {
                let pos = self.names.iter().position(|n| n == cn).ok_or_else(|| {
                    FlintError::PermissionDenied(format!(
                        "the client certificate names {cn:?}, which is not a client of this run"
                    ))
                })?;
                pos as ClientId + 1
            }
            _ => match self.reclaimed(secret, joined) {
                Some(id) => id,
                None => self.free_slot(joined, now).ok_or_else(|| {
                    FlintError::Precondition(format!(
                        "every one of the {} client slots is claimed",
                        self.names.len()
                    ))
                })?,
            },
        };
        // Checked as if a lapsed claim (or one its own secret takes back) were gone, and put
        // back if the call is refused: a refused Claim changes nothing.
        let replaced = self.lapsed(id, joined, now) || self.reclaimed(secret, joined) == Some(id);
        let lapsed = replaced.then(|| self.claims.remove(&id)).flatten();
        let checked = self
            .check_claim(id, token, peer)
            .and_then(|()| self.check_enrollment(id, token, secret, peer));
        let enrolled = match checked {
            Ok(enrolled) => enrolled,
            Err(e) => {
                if let Some(previous) = lapsed {
                    self.claims.insert(id, previous);
                }
                return Err(e);
            }
        };
        if lapsed.is_some() {
            tracing::warn!(
                client = id,
                lease_secs = self.lease.as_secs_f64(),
                "a claim lapsed unjoined; the slot goes to the next claimer"
            );
        }
        self.enroll(id, enrolled);
        self.claims.insert(id, (hash, holder));
        self.unjoined_since.insert(id, now);
        Ok((id, self.name(id).unwrap_or_default().to_string(), true))
    }

    /// Whether a call naming client `id` comes from the process that holds it.
    pub fn check(&self, id: ClientId, token: Option<&str>, peer: &Peer) -> Result<()> {
        let Some(token) = token else {
            return Err(FlintError::Unauthenticated(
                "the call carries no client token (flint-token metadata); join first".into(),
            ));
        };
        let Some((held, _)) = self.claims.get(&id) else {
            return Err(FlintError::Unauthenticated(format!(
                "client {id} has not joined"
            )));
        };
        let name = self.name(id).unwrap_or_default();
        certified_for(peer, name)?;
        if hash(token)? != *held {
            return Err(FlintError::PermissionDenied(format!(
                "the token does not hold client {name:?}"
            )));
        }
        Ok(())
    }

    pub fn claimed(&self) -> usize {
        self.claims.len()
    }

    /// The slot `secret` enrolled, if its claimer has not joined it: a claimer that died before
    /// its Join and came back with a new token (no `--out` kept the old one) takes its slot back
    /// with its secret, instead of finding the secret spent on a slot it can no longer hold.
    fn reclaimed(&self, secret: &str, joined: &dyn Fn(ClientId) -> bool) -> Option<ClientId> {
        if !matches!(self.admission, Admission::Enrolled(_)) {
            return None;
        }
        let h = hash(secret).ok()?;
        self.enrolled.get(&h).copied().filter(|&id| !joined(id))
    }

    /// The first unclaimed slot in id order, else the first whose claim lapsed.
    fn free_slot(&self, joined: &dyn Fn(ClientId) -> bool, now: Instant) -> Option<ClientId> {
        let ids = 1..=self.names.len() as ClientId;
        ids.clone()
            .find(|id| !self.claims.contains_key(id))
            .or_else(|| ids.into_iter().find(|&id| self.lapsed(id, joined, now)))
    }

    fn lapsed(&self, id: ClientId, joined: &dyn Fn(ClientId) -> bool, now: Instant) -> bool {
        !joined(id)
            && self
                .unjoined_since
                .get(&id)
                .is_some_and(|&since| now.saturating_duration_since(since) >= self.lease)
    }
}

fn uncertified() -> FlintError {
    FlintError::Unauthenticated("mutual TLS is required: present a client certificate".into())
}

/// Whether `peer` may act as the slot called `name`.
fn certified_for(peer: &Peer, name: &str) -> Result<()> {
    match peer {
        Peer::Anonymous => Ok(()),
        Peer::Uncertified => Err(uncertified()),
        Peer::Certified(cn) if cn == name || cn == POOL_IDENTITY => Ok(()),
        Peer::Certified(cn) => Err(FlintError::PermissionDenied(format!(
            "the client certificate names {cn:?}, not {name:?}"
        ))),
    }
}

/// What an enrollment file lists for `secret`: its hash in hex (the hash the server keeps of
/// a token or secret).
pub fn secret_hash_hex(secret: &str) -> Result<String> {
    Ok(flint_common::hex::encode(&hash(secret)?))
}

fn hash(token: &str) -> Result<[u8; 32]> {
    if !TOKEN_DIGITS.contains(&token.len()) || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(FlintError::Unauthenticated(format!(
            "a client token is {} to {} hex digits",
            TOKEN_DIGITS.start(),
            TOKEN_DIGITS.end()
        )));
    }
    Ok(Sha256::digest(token.as_bytes()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef";
    const B: &str = "fedcba9876543210fedcba9876543210";

    fn ids() -> Identities {
        Identities::new(vec!["client-1".into(), "client-2".into()])
    }

    fn open_ids() -> Identities {
        ids().with_admission(Admission::Open)
    }

    /// A claim at once, with no slot joined.
    fn claim(
        i: &mut Identities,
        token: &str,
        secret: &str,
        peer: &Peer,
    ) -> Result<(ClientId, String, bool)> {
        i.claim_any(
            token,
            secret,
            peer,
            Holder::default(),
            &|_| false,
            Instant::now(),
        )
    }

    #[test]
    fn a_slot_bound_to_one_token_refuses_every_other() {
        let mut i = ids();
        i.check_claim(1, A, &Peer::Anonymous).unwrap();
        i.bind(1, A, Holder::default()).unwrap();
        // The same token may join again (a lost reply); another may not.
        i.check_claim(1, A, &Peer::Anonymous).unwrap();
        let e = i.check_claim(1, B, &Peer::Anonymous).unwrap_err();
        assert!(matches!(e, FlintError::PermissionDenied(m) if m.contains("already held")));
        i.check(1, Some(A), &Peer::Anonymous).unwrap();
        assert!(matches!(
            i.check(1, Some(B), &Peer::Anonymous),
            Err(FlintError::PermissionDenied(_))
        ));
        assert!(matches!(
            i.check(1, None, &Peer::Anonymous),
            Err(FlintError::Unauthenticated(_))
        ));
        assert!(matches!(
            i.check(2, Some(A), &Peer::Anonymous),
            Err(FlintError::Unauthenticated(_))
        ));
    }

    #[test]
    fn short_or_non_hex_tokens_are_refused() {
        let i = ids();
        for t in ["", "abc", &"g".repeat(32), &"a".repeat(129)] {
            assert!(matches!(
                i.check_claim(1, t, &Peer::Anonymous),
                Err(FlintError::Unauthenticated(_))
            ));
        }
    }

    #[test]
    fn a_certificate_acts_only_for_the_client_it_names() {
        let mut i = ids();
        let one = Peer::Certified("client-1".into());
        let e = i.check_claim(2, A, &one).unwrap_err();
        assert!(matches!(e, FlintError::PermissionDenied(m) if m.contains("not \"client-2\"")));
        i.check_claim(1, A, &one).unwrap();
        i.bind(1, A, Holder::default()).unwrap();
        let two = Peer::Certified("client-2".into());
        assert!(matches!(
            i.check(1, Some(A), &two),
            Err(FlintError::PermissionDenied(_))
        ));
        assert!(matches!(
            i.check(1, Some(A), &Peer::Uncertified),
            Err(FlintError::Unauthenticated(_))
        ));
        i.check(1, Some(A), &Peer::Certified(POOL_IDENTITY.into()))
            .unwrap();
        // Its own certificate, started again with a new token, takes the slot back; the pool
        // certificate cannot.
        let pool = Peer::Certified(POOL_IDENTITY.into());
        assert!(matches!(
            i.check_claim(1, B, &pool),
            Err(FlintError::PermissionDenied(_))
        ));
        i.check_claim(1, B, &one).unwrap();
        i.bind(1, B, Holder::default()).unwrap();
        i.check(1, Some(B), &one).unwrap();
        assert!(matches!(
            i.check(1, Some(A), &one),
            Err(FlintError::PermissionDenied(_))
        ));
    }

    #[test]
    fn unnamed_clients_get_slots_by_arrival_and_keep_them() {
        let mut i = open_ids();
        assert_eq!(claim(&mut i, B, "", &Peer::Anonymous).unwrap().0, 1);
        assert_eq!(claim(&mut i, A, "", &Peer::Anonymous).unwrap().0, 2);
        // A repeated claim gets its slot back; a third token finds none left.
        assert_eq!(
            claim(&mut i, B, "", &Peer::Anonymous).unwrap(),
            (1, "client-1".into(), false)
        );
        let e = claim(&mut i, &"c".repeat(32), "", &Peer::Anonymous).unwrap_err();
        assert!(matches!(e, FlintError::Precondition(m) if m.contains("every one of the 2")));
    }

    /// With enrollment, a slot is bound the first time only with an issued,
    /// unused secret; its holder's later calls, and a slot's own certificate, need none.
    #[test]
    fn enrollment_takes_one_issued_secret_per_slot() {
        let secret = "5e".repeat(16);
        let issued = BTreeSet::from([hash(&secret).unwrap()]);
        let mut i = ids().with_enrollment(issued);
        let anon = Peer::Anonymous;
        let e = i.check_enrollment(1, A, "", &anon).unwrap_err();
        assert!(matches!(e, FlintError::Unauthenticated(_)), "{e:?}");
        let e = i
            .check_enrollment(1, A, &"0f".repeat(16), &anon)
            .unwrap_err();
        assert!(
            matches!(e, FlintError::PermissionDenied(m) if m.contains("not one this run issued"))
        );
        let h = i.check_enrollment(1, A, &secret, &anon).unwrap();
        i.enroll(1, h);
        i.bind(1, A, Holder::default()).unwrap();
        assert_eq!(i.enrollment_of(1), h);
        assert_eq!(
            i.check_enrollment(1, A, "", &anon).unwrap(),
            None,
            "its holder again"
        );
        let e = i.check_enrollment(2, B, &secret, &anon).unwrap_err();
        assert!(matches!(e, FlintError::PermissionDenied(m) if m.contains("used already")));
        let own = Peer::Certified("client-2".into());
        assert_eq!(
            i.check_enrollment(2, B, "", &own).unwrap(),
            None,
            "its own certificate"
        );
        let e = claim(&mut i, B, "", &anon);
        assert!(matches!(e, Err(FlintError::Unauthenticated(_))), "{e:?}");
    }

    /// A free slot goes before a lapsed one; a Claim refused for its secret leaves a lapsed
    /// claim as it was; a slot taken again after a lapse journals its new claimer's secret.
    #[test]
    fn a_lapse_frees_a_slot_only_for_a_claim_that_is_taken() {
        let (s1, s2) = ("5e".repeat(16), "6f".repeat(16));
        let issued = BTreeSet::from([hash(&s1).unwrap(), hash(&s2).unwrap()]);
        let lease = Duration::from_secs(60);
        let mut i = ids().with_lease(lease).with_enrollment(issued);
        let (t0, anon, none) = (Instant::now(), Peer::Anonymous, |_| false);
        let claim = |i: &mut Identities, token: &str, secret: &str, at| {
            i.claim_any(token, secret, &anon, Holder::default(), &none, at)
        };
        assert_eq!(claim(&mut i, A, &s1, t0).unwrap().0, 1);
        // Slot 1 has lapsed, but slot 2 is free: it goes first.
        assert_eq!(claim(&mut i, B, &s2, t0 + lease).unwrap().0, 2);
        let c = "c".repeat(32);
        // Both lapsed; a claim without a secret is refused and slot 1 stays A's.
        assert!(claim(&mut i, &c, "", t0 + 2 * lease).is_err());
        i.check_claim(1, A, &anon).unwrap();
        // A's spent secret cannot bind slot 2; slot 1, with it, is taken again.
        assert!(matches!(
            i.check_enrollment(2, &c, &s1, &anon),
            Err(FlintError::PermissionDenied(_))
        ));
        assert_eq!(claim(&mut i, &c, &s1, t0 + 2 * lease).unwrap().0, 1);
        assert_eq!(i.enrollment_of(1), Some(hash(&s1).unwrap()));
        assert_eq!(i.enrollment_of(2), Some(hash(&s2).unwrap()));
    }

    /// A claimer that died before its Join and came back with a new token takes its slot back
    /// with its secret, at once; once the slot is joined, the secret takes nothing back.
    #[test]
    fn a_secret_takes_back_its_unjoined_slot_for_a_new_token() {
        let (s1, s2) = ("5e".repeat(16), "6f".repeat(16));
        let issued = BTreeSet::from([hash(&s1).unwrap(), hash(&s2).unwrap()]);
        let mut i = ids().with_enrollment(issued);
        let (t0, anon) = (Instant::now(), Peer::Anonymous);
        let claim = |i: &mut Identities, token: &str, joined: &dyn Fn(ClientId) -> bool| {
            i.claim_any(token, &s1, &anon, Holder::default(), joined, t0)
        };
        let (c, d) = ("c".repeat(32), "d".repeat(32));
        assert_eq!(
            claim(&mut i, A, &|_| false).unwrap(),
            (1, "client-1".into(), true)
        );
        assert_eq!(
            claim(&mut i, &c, &|_| false).unwrap(),
            (1, "client-1".into(), true)
        );
        i.check_claim(1, &c, &anon).unwrap();
        assert!(i.check_claim(1, A, &anon).is_err(), "the old token lost it");
        assert_eq!(i.enrollment_of(1), Some(hash(&s1).unwrap()));
        let e = claim(&mut i, &d, &|id| id == 1).unwrap_err();
        assert!(matches!(e, FlintError::PermissionDenied(m) if m.contains("used already")));
        i.check_claim(1, &c, &anon).unwrap();
        assert_eq!(i.claimed(), 1, "a refused claim binds nothing");
    }

    /// A claim whose claimer never joins lapses after the lease, and the slot goes
    /// to the next claimer; a claim whose claimer joined never lapses, nor does a fresh one.
    #[test]
    fn a_claim_left_unjoined_lapses_after_its_lease() {
        let lease = Duration::from_secs(60);
        let mut i = open_ids().with_lease(lease);
        let t0 = Instant::now();
        let none = |_| false;
        assert_eq!(
            i.claim_any(A, "", &Peer::Anonymous, Holder::default(), &none, t0)
                .unwrap()
                .0,
            1
        );
        assert_eq!(
            i.claim_any(B, "", &Peer::Anonymous, Holder::default(), &none, t0)
                .unwrap()
                .0,
            2
        );
        i.bind(2, B, Holder::default()).unwrap();
        let c = &"c".repeat(32);
        let early = i.claim_any(
            c,
            "",
            &Peer::Anonymous,
            Holder::default(),
            &none,
            t0 + lease / 2,
        );
        assert!(
            matches!(early, Err(FlintError::Precondition(_))),
            "{early:?}"
        );
        // Slot 2 joined (bind at Join): only slot 1's claim lapses.
        let two_joined = |id| id == 2;
        let later = t0 + lease;
        assert_eq!(
            i.claim_any(
                c,
                "",
                &Peer::Anonymous,
                Holder::default(),
                &two_joined,
                later
            )
            .unwrap()
            .0,
            1
        );
        // The first claimer, late, is refused the slot it lost.
        assert!(matches!(
            i.check_claim(1, A, &Peer::Anonymous),
            Err(FlintError::PermissionDenied(_))
        ));
        i.check_claim(2, B, &Peer::Anonymous).unwrap();
    }

    #[test]
    fn an_unnamed_client_with_its_own_certificate_gets_its_own_slot() {
        let mut i = ids();
        let two = Peer::Certified("client-2".into());
        assert_eq!(claim(&mut i, A, "", &two).unwrap().0, 2);
        let stranger = Peer::Certified("mallory".into());
        assert!(matches!(
            claim(&mut i, B, "", &stranger),
            Err(FlintError::PermissionDenied(_))
        ));
        let pool = Peer::Certified(POOL_IDENTITY.into());
        assert_eq!(claim(&mut open_ids(), B, "", &pool).unwrap().0, 1);
    }

    /// Without enrollment and not opened, a slot is bound only by the certificate that names
    /// it: the pool certificate and a bare token take none, by Join or by Claim, and change
    /// nothing.
    #[test]
    fn a_run_neither_enrolled_nor_open_admits_only_named_certificates() {
        let mut i = ids();
        let pool = Peer::Certified(POOL_IDENTITY.into());
        for peer in [&pool, &Peer::Anonymous] {
            let e = i.check_enrollment(1, A, "", peer).unwrap_err();
            assert!(
                matches!(&e, FlintError::PermissionDenied(m) if m.contains("--open-enrollment")),
                "{e:?}"
            );
            assert!(claim(&mut i, A, "", peer).is_err());
        }
        assert_eq!(i.claimed(), 0);
        let two = Peer::Certified("client-2".into());
        assert_eq!(i.check_enrollment(2, B, "", &two).unwrap(), None);
        assert_eq!(claim(&mut i, B, "", &two).unwrap().0, 2);
    }
}
