//! The server's side of a round: it relays keys and sealed shares, holds masked inputs only,
//! and from the survivors' shares removes the masks from their sum.

use std::collections::{BTreeMap, BTreeSet};

use super::crypto::{self, KeyPair, SHARE_BYTES};
use super::ring;
use super::{Advert, MAX_GROUP, Unmasking, refuse};
use crate::{ClientId, Result, Round};

/// Where the round is; each stage takes one kind of message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    Advertising,
    Sharing,
    Masking,
    Unmasking,
}

pub struct SecAggServer {
    round: Round,
    threshold: usize,
    len: usize,
    stage: Stage,
    /// U1's adverts.
    adverts: BTreeMap<ClientId, Advert>,
    /// Sealed shares by sender, then recipient (their senders are U2).
    mail: BTreeMap<ClientId, BTreeMap<ClientId, Vec<u8>>>,
    /// U3's masked inputs: all the server ever holds of an input.
    masked: BTreeMap<ClientId, Vec<u32>>,
    replies: BTreeMap<ClientId, Unmasking>,
}

/// Bytes of one sealed envelope: the ids, two shares, the tag.
const SEALED_BYTES: usize = 8 + 2 * SHARE_BYTES + 16;

impl SecAggServer {
    /// A round of vectors of `len` ring elements, any `threshold` clients of which must stay to
    /// the end (the checks of `super::check_threshold` come first).
    pub fn new(round: Round, threshold: usize, len: usize) -> SecAggServer {
        SecAggServer {
            round,
            threshold,
            len,
            stage: Stage::Advertising,
            adverts: BTreeMap::new(),
            mail: BTreeMap::new(),
            masked: BTreeMap::new(),
            replies: BTreeMap::new(),
        }
    }

    pub fn stage(&self) -> Stage {
        self.stage
    }

    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// Sets the threshold of a group formed by what its members declared, once its keys are
    /// in and before its roster closes (the checks of `super::check_threshold` come first).
    pub fn set_threshold(&mut self, threshold: usize) -> Result<()> {
        self.expect(Stage::Advertising)?;
        self.threshold = threshold;
        Ok(())
    }

    /// The messages the current stage has taken so far.
    pub fn taken(&self) -> usize {
        match self.stage {
            Stage::Advertising => self.adverts.len(),
            Stage::Sharing => self.mail.len(),
            Stage::Masking => self.masked.len(),
            Stage::Unmasking => self.replies.len(),
        }
    }

    /// The clients whose message the current stage waits for: every one asked (advertising),
    /// U1, U2, then U3.
    pub fn awaited(&self, asked: usize) -> usize {
        match self.stage {
            Stage::Advertising => asked,
            Stage::Sharing => self.adverts.len(),
            Stage::Masking => self.mail.len(),
            Stage::Unmasking => self.masked.len(),
        }
    }

    fn expect(&self, stage: Stage) -> Result<()> {
        match self.stage == stage {
            true => Ok(()),
            false => refuse(format!(
                "a message for {stage:?} while the round is {:?}",
                self.stage
            )),
        }
    }

    /// Takes `client`'s keys; the same advert again is a repeat and changes nothing, another
    /// replaces it (a client that started its round again: nothing was shared yet).
    pub fn advertise(&mut self, client: ClientId, advert: Advert) -> Result<()> {
        if self.adverts.get(&client) == Some(&advert) {
            return Ok(());
        }
        self.expect(Stage::Advertising)?;
        if self.adverts.len() >= MAX_GROUP && !self.adverts.contains_key(&client) {
            return refuse(format!("client {client}'s keys past {MAX_GROUP} clients"));
        }
        // A copied or degenerate key would make every honest client refuse the roster.
        let taken = self
            .adverts
            .iter()
            .filter(|(c, _)| **c != client)
            .flat_map(|(_, a)| [a.mask_key, a.envelope_key]);
        let keys = [advert.mask_key, advert.envelope_key];
        if keys[0] == keys[1] || taken.into_iter().any(|k| keys.contains(&k)) {
            return refuse(format!("client {client}'s keys are another's"));
        }
        if keys.iter().any(crypto::is_low_order) {
            return refuse(format!("client {client}'s key is of low order"));
        }
        self.adverts.insert(client, advert);
        Ok(())
    }

    /// Closes U1: the roster every member is sent.
    pub fn roster(&mut self) -> Result<BTreeMap<ClientId, Advert>> {
        self.expect(Stage::Advertising)?;
        self.at_threshold(self.adverts.len(), "advertised keys")?;
        self.stage = Stage::Sharing;
        Ok(self.adverts.clone())
    }

    fn at_threshold(&self, count: usize, what: &str) -> Result<()> {
        match count >= self.threshold {
            true => Ok(()),
            false => refuse(format!(
                "{count} clients {what}, under the threshold {}: the round cannot end",
                self.threshold
            )),
        }
    }

    /// One member's sealed shares, one for every other member of the roster, each of the
    /// envelope's size.
    pub fn share(&mut self, client: ClientId, sealed: BTreeMap<ClientId, Vec<u8>>) -> Result<()> {
        if self.mail.get(&client) == Some(&sealed) {
            return Ok(());
        }
        self.expect(Stage::Sharing)?;
        if !self.adverts.contains_key(&client) || self.mail.contains_key(&client) {
            return refuse(format!(
                "shares from client {client}, not in the roster or sent twice"
            ));
        }
        let others: BTreeSet<ClientId> = self
            .adverts
            .keys()
            .copied()
            .filter(|&v| v != client)
            .collect();
        if sealed.keys().copied().collect::<BTreeSet<_>>() != others {
            return refuse(format!(
                "client {client}'s shares are not one for each other member"
            ));
        }
        if sealed.values().any(|s| s.len() != SEALED_BYTES) {
            return refuse(format!(
                "client {client}'s shares are not {SEALED_BYTES} bytes each"
            ));
        }
        self.mail.insert(client, sealed);
        Ok(())
    }

    /// Closes U2: for each of its members the envelopes the others of U2 sealed to it.
    pub fn inboxes(&mut self) -> Result<BTreeMap<ClientId, BTreeMap<ClientId, Vec<u8>>>> {
        self.expect(Stage::Sharing)?;
        self.at_threshold(self.mail.len(), "shared their keys")?;
        self.stage = Stage::Masking;
        let senders: Vec<ClientId> = self.mail.keys().copied().collect();
        Ok(senders
            .iter()
            .map(|&v| {
                let inbox = senders
                    .iter()
                    .filter(|&&u| u != v)
                    .map(|&u| (u, self.mail[&u][&v].clone()))
                    .collect();
                (v, inbox)
            })
            .collect())
    }

    pub fn masked(&mut self, client: ClientId, y: Vec<u32>) -> Result<()> {
        if self.masked.get(&client) == Some(&y) {
            return Ok(());
        }
        self.expect(Stage::Masking)?;
        if !self.mail.contains_key(&client) || self.masked.contains_key(&client) {
            return refuse(format!(
                "a masked input from client {client}, which shared no keys or sent it twice"
            ));
        }
        if y.len() != self.len {
            return refuse(format!(
                "client {client}'s masked input has {} values, not {}",
                y.len(),
                self.len
            ));
        }
        self.masked.insert(client, y);
        Ok(())
    }

    /// Closes U3: the survivors every member of U3 is sent.
    pub fn survivors(&mut self) -> Result<BTreeSet<ClientId>> {
        self.expect(Stage::Masking)?;
        self.at_threshold(self.masked.len(), "sent masked inputs")?;
        self.stage = Stage::Unmasking;
        Ok(self.masked.keys().copied().collect())
    }

    /// The masked inputs held: what a test reads to see that no input is there in the clear.
    #[cfg(test)]
    pub(crate) fn held_inputs(&self) -> impl Iterator<Item = (&ClientId, &Vec<u32>)> {
        self.masked.iter()
    }

    /// One survivor's shares: a seed share for each survivor, a key share for each member of
    /// U2 that did not survive, each of a share's size.
    pub fn unmasking(&mut self, client: ClientId, reply: Unmasking) -> Result<()> {
        if self.replies.get(&client) == Some(&reply) {
            return Ok(());
        }
        self.expect(Stage::Unmasking)?;
        if !self.masked.contains_key(&client) || self.replies.contains_key(&client) {
            return refuse(format!(
                "shares from client {client}, not a survivor or sent twice"
            ));
        }
        let survivors: BTreeSet<ClientId> = self.masked.keys().copied().collect();
        let dropped: BTreeSet<ClientId> = self
            .mail
            .keys()
            .copied()
            .filter(|u| !survivors.contains(u))
            .collect();
        let sized = |m: &BTreeMap<ClientId, Vec<u8>>| m.values().all(|s| s.len() == SHARE_BYTES);
        let fits = reply.seed_shares.keys().copied().collect::<BTreeSet<_>>() == survivors
            && reply.key_shares.keys().copied().collect::<BTreeSet<_>>() == dropped
            && sized(&reply.seed_shares)
            && sized(&reply.key_shares);
        if !fits {
            return refuse(format!(
                "client {client}'s shares are not one per survivor and one per dropped client"
            ));
        }
        self.replies.insert(client, reply);
        Ok(())
    }

    /// The sum of the survivors' inputs, from the first `threshold` replies in id order: each
    /// survivor's self-mask and each dropped client's pairwise masks rebuilt and taken out.
    /// A reconstruction that does not match what its client advertised is refused.
    pub fn sum(&self) -> Result<Vec<u32>> {
        self.expect(Stage::Unmasking)?;
        self.at_threshold(self.replies.len(), "sent their shares")?;
        let replies: Vec<&Unmasking> = self.replies.values().take(self.threshold).collect();
        let mut sum = vec![0u32; self.len];
        for (&u, y) in &self.masked {
            ring::add(&mut sum, y);
            let shares: Vec<Vec<u8>> = replies.iter().map(|r| r.seed_shares[&u].clone()).collect();
            let seed = crypto::combine(&shares)?;
            if crypto::digest(&seed) != self.adverts[&u].self_mask_digest {
                return refuse(format!(
                    "the shares of client {u}'s self-mask do not rebuild it"
                ));
            }
            ring::sub(&mut sum, &crypto::mask(&seed, self.len));
        }
        for &v in self.mail.keys().filter(|v| !self.masked.contains_key(v)) {
            self.take_out_dropped(v, &replies, &mut sum)?;
        }
        Ok(sum)
    }

    /// Client `v` shared its keys and sent no input: every survivor's pairwise mask with it is
    /// still in the sum, rebuilt from `v`'s mask key.
    fn take_out_dropped(&self, v: ClientId, replies: &[&Unmasking], sum: &mut [u32]) -> Result<()> {
        let shares: Vec<Vec<u8>> = replies.iter().map(|r| r.key_shares[&v].clone()).collect();
        let key = KeyPair::from_secret(crypto::combine(&shares)?);
        if key.public != self.adverts[&v].mask_key {
            return refuse(format!(
                "the shares of client {v}'s mask key do not rebuild it"
            ));
        }
        for &u in self.masked.keys() {
            let pairwise = super::pairwise_mask(
                &key.secret,
                &self.adverts[&u].mask_key,
                self.round,
                u,
                v,
                self.len,
            )?;
            // Survivor u added the mask where u < v and took it away where u > v.
            match u < v {
                true => ring::sub(sum, &pairwise),
                false => ring::add(sum, &pairwise),
            }
        }
        Ok(())
    }
}
