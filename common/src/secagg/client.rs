//! One client's side of a round: its keys, its shares for the others, its masked input, and
//! the shares it reveals at the end, once.

use std::collections::{BTreeMap, BTreeSet};

use rand::CryptoRng;

use super::crypto::{self, KeyPair, SHARE_BYTES};
use super::ring;
use super::{Advert, Unmasking, refuse};
use crate::{ClientId, Result, Round};

/// The shares another client gave this one: of its mask key and of its self-mask seed.
struct Held {
    key: Vec<u8>,
    seed: Vec<u8>,
}

pub struct SecAggClient {
    id: ClientId,
    round: Round,
    threshold: usize,
    /// c: the envelopes' key pair.
    envelope: KeyPair,
    /// s: the pairwise masks' key pair.
    masking: KeyPair,
    /// b: the self-mask's seed.
    self_seed: [u8; 32],
    /// U1, with every member's advert.
    roster: BTreeMap<ClientId, Advert>,
    /// U2: the members whose shares reached this client (and itself).
    masked_with: BTreeSet<ClientId>,
    held: BTreeMap<ClientId, Held>,
    /// The envelopes sealed, given again to a repeated call (sealing twice under one key and
    /// nonce would leak).
    sealed: Option<BTreeMap<ClientId, Vec<u8>>>,
    /// The masked input sent, with the inbox it was masked for.
    sent: Option<(BTreeSet<ClientId>, Vec<u32>)>,
    /// The shares revealed, with the survivors they were revealed for.
    revealed: Option<(BTreeSet<ClientId>, Unmasking)>,
}

/// The plaintext of one envelope: sender, recipient, then the two shares.
const ENVELOPE_BYTES: usize = 8 + 2 * SHARE_BYTES;

impl SecAggClient {
    /// Fresh keys for `round` (from `rng`: the OS's in a run) and what the server relays of them.
    pub fn new<R: CryptoRng + ?Sized>(
        id: ClientId,
        round: Round,
        rng: &mut R,
    ) -> (SecAggClient, Advert) {
        let envelope = KeyPair::from_secret(crypto::secret_bytes(rng));
        let masking = KeyPair::from_secret(crypto::secret_bytes(rng));
        let self_seed = crypto::secret_bytes(rng);
        let advert = Advert {
            envelope_key: envelope.public,
            mask_key: masking.public,
            self_mask_digest: crypto::digest(&self_seed),
        };
        let client = SecAggClient {
            id,
            round,
            threshold: 0,
            envelope,
            masking,
            self_seed,
            roster: BTreeMap::new(),
            masked_with: BTreeSet::new(),
            held: BTreeMap::new(),
            sealed: None,
            sent: None,
            revealed: None,
        };
        (client, advert)
    }

    /// Splits the mask key and the self-mask seed among `roster` (U1, this client in it), any
    /// `threshold` of them enough to rebuild either, and seals each other member's two shares
    /// to it: what the server relays, by recipient. Asked again with the same roster, the same
    /// envelopes; with another, refused.
    pub fn share_keys<R: CryptoRng + ?Sized>(
        &mut self,
        roster: BTreeMap<ClientId, Advert>,
        threshold: usize,
        rng: &mut R,
    ) -> Result<BTreeMap<ClientId, Vec<u8>>> {
        if let Some(sealed) = &self.sealed {
            return match roster == self.roster && threshold == self.threshold {
                true => Ok(sealed.clone()),
                false => refuse("a second roster, unlike the first"),
            };
        }
        self.check_roster(&roster, threshold)?;
        self.threshold = threshold;
        let n = roster.len();
        let key_shares = crypto::split(&self.masking.secret.to_bytes(), self.threshold, n, rng)?;
        let seed_shares = crypto::split(&self.self_seed, self.threshold, n, rng)?;
        let mut own = None;
        let mut sealed = BTreeMap::new();
        for ((&v, advert), (key, seed)) in
            roster.iter().zip(key_shares.into_iter().zip(seed_shares))
        {
            if v == self.id {
                own = Some(Held { key, seed });
                continue;
            }
            let mut plain = Vec::with_capacity(ENVELOPE_BYTES);
            plain.extend(self.id.to_le_bytes());
            plain.extend(v.to_le_bytes());
            plain.extend(&key);
            plain.extend(&seed);
            let aad = crypto::info("flint secagg envelope", self.round, self.id, v);
            let sealing = crypto::agree(&self.envelope.secret, &advert.envelope_key, &aad)?;
            sealed.insert(v, crypto::seal(&sealing, &aad, &plain)?);
        }
        // Kept only once every envelope is sealed: a refused call changes nothing.
        if let Some(own) = own {
            self.held.insert(self.id, own);
        }
        self.roster = roster;
        self.sealed = Some(sealed.clone());
        Ok(sealed)
    }

    fn check_roster(&self, roster: &BTreeMap<ClientId, Advert>, threshold: usize) -> Result<()> {
        super::check_threshold(threshold, roster.len())
            .or_else(|e| refuse(format!("a roster of {} clients: {e}", roster.len())))?;
        match roster.get(&self.id) {
            Some(a)
                if a.mask_key == self.masking.public && a.envelope_key == self.envelope.public => {}
            _ => return refuse(format!("a roster without client {}'s own keys", self.id)),
        }
        let keys: BTreeSet<[u8; 32]> = roster
            .values()
            .flat_map(|a| [a.mask_key, a.envelope_key])
            .collect();
        if keys.len() != 2 * roster.len() {
            return refuse("a roster in which two keys are the same");
        }
        Ok(())
    }

    /// Opens the envelopes the server relayed (their senders are U2) and returns `input` masked:
    /// plus the self-mask, plus or minus one pairwise mask per other member of U2.
    /// Asked again for the same inbox, the same masked input; for another, refused (two inputs
    /// masked for different sets would let their difference show).
    pub fn masked_input(
        &mut self,
        inbox: BTreeMap<ClientId, Vec<u8>>,
        input: &[u32],
    ) -> Result<Vec<u32>> {
        let from: BTreeSet<ClientId> = inbox.keys().copied().collect();
        if let Some((masked_for, y)) = &self.sent {
            return match *masked_for == from {
                true => Ok(y.clone()),
                false => refuse("a second inbox, unlike the first"),
            };
        }
        if self.sealed.is_none() {
            return refuse("an inbox before this client shared its keys");
        }
        let opened = inbox
            .iter()
            .map(|(&u, sealed)| Ok((u, self.open(u, sealed)?)))
            .collect::<Result<Vec<_>>>()?;
        if opened.len() + 1 < self.threshold {
            return refuse(format!(
                "{} clients shared their keys, under the threshold {}",
                opened.len() + 1,
                self.threshold
            ));
        }
        let masked_with: BTreeSet<ClientId> = from.iter().copied().chain([self.id]).collect();
        let mut y = input.to_vec();
        ring::add(&mut y, &crypto::mask(&self.self_seed, input.len()));
        for &v in masked_with.iter().filter(|&&v| v != self.id) {
            let pairwise = super::pairwise_mask(
                &self.masking.secret,
                &self.roster[&v].mask_key,
                self.round,
                self.id,
                v,
                input.len(),
            )?;
            match self.id < v {
                true => ring::add(&mut y, &pairwise),
                false => ring::sub(&mut y, &pairwise),
            }
        }
        // Kept only once the input is masked: a refused inbox changes nothing.
        self.held.extend(opened);
        self.masked_with = masked_with;
        self.sent = Some((from, y.clone()));
        Ok(y)
    }

    fn open(&self, u: ClientId, sealed: &[u8]) -> Result<Held> {
        let Some(advert) = self.roster.get(&u) else {
            return refuse(format!("shares from client {u}, not in the roster"));
        };
        let aad = crypto::info("flint secagg envelope", self.round, u, self.id);
        let key = crypto::agree(&self.envelope.secret, &advert.envelope_key, &aad)?;
        let plain = crypto::open(&key, &aad, sealed)?;
        let ids_ok = plain.len() == ENVELOPE_BYTES
            && plain[..4] == u.to_le_bytes()
            && plain[4..8] == self.id.to_le_bytes();
        if !ids_ok {
            return refuse(format!(
                "client {u}'s envelope is not addressed from it to {}",
                self.id
            ));
        }
        Ok(Held {
            key: plain[8..8 + SHARE_BYTES].to_vec(),
            seed: plain[8 + SHARE_BYTES..].to_vec(),
        })
    }

    /// For each survivor (U3, whose masked inputs the server holds) its self-mask seed's share,
    /// for each member of U2 that did not survive its mask key's share; never both for one
    /// client, and only for one set of survivors: asked again with the same set (a reply lost
    /// on its way), the same shares; with another, refused.
    pub fn unmask(&mut self, survivors: &BTreeSet<ClientId>) -> Result<Unmasking> {
        if let Some((revealed_for, out)) = &self.revealed {
            return match revealed_for == survivors {
                true => Ok(out.clone()),
                false => refuse("asked to unmask a second time, for other survivors"),
            };
        }
        if !survivors.is_subset(&self.masked_with) || !survivors.contains(&self.id) {
            return refuse("survivors that did not all share keys with this client");
        }
        if survivors.len() < self.threshold {
            return refuse(format!(
                "{} survivors, under the threshold {}",
                survivors.len(),
                self.threshold
            ));
        }
        let mut out = Unmasking::default();
        for &v in &self.masked_with {
            let held = &self.held[&v];
            match survivors.contains(&v) {
                true => out.seed_shares.insert(v, held.seed.clone()),
                false => out.key_shares.insert(v, held.key.clone()),
            };
        }
        self.revealed = Some((survivors.clone(), out.clone()));
        Ok(out)
    }
}
