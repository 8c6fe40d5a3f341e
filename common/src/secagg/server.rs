//! The server's side of a round: it relays keys and sealed shares, holds masked inputs only,
//! and from the survivors' shares removes the masks from their sum.

use std::collections::{BTreeMap, BTreeSet};

use super::crypto::{self, KeyPair, SHARE_BYTES};
use super::graph::{self, Graph};
use super::ring;
use super::{Advert, MAX_SPARSE_GROUP, Unmasking, refuse};
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
    /// The complete graph's threshold; a sparse graph's are each neighbourhood's.
    threshold: usize,
    len: usize,
    stage: Stage,
    /// SecAgg+'s neighbours per member as configured (`None`: [`graph::default_degree`]).
    degree: Option<usize>,
    /// Drawn when U1 closes.
    graph: Graph,
    /// U1's adverts.
    adverts: BTreeMap<ClientId, Advert>,
    /// Whose every advertised key is: a key is one member's only.
    key_owners: BTreeMap<[u8; 32], ClientId>,
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
            degree: None,
            graph: Graph::Complete,
            adverts: BTreeMap::new(),
            key_owners: BTreeMap::new(),
            mail: BTreeMap::new(),
            masked: BTreeMap::new(),
            replies: BTreeMap::new(),
        }
    }

    /// A round over SecAgg+'s graph of `degree` neighbours per member (even, at least 2; `None`:
    /// [`graph::default_degree`] of the group); the complete graph where it reaches every other
    /// member.
    pub fn with_degree(self, degree: Option<usize>) -> SecAggServer {
        SecAggServer { degree, ..self }
    }

    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The threshold of the complete graph, and the least of a sparse graph's (for a stage's
    /// count of messages, which must reach it).
    fn threshold(&self) -> usize {
        match self.graph {
            Graph::Complete => self.threshold,
            Graph::Sparse(_) => self
                .adverts
                .keys()
                .map(|&c| self.threshold_of(c))
                .min()
                .unwrap_or(0),
        }
    }

    /// Whether `client`'s keys are in U1.
    pub fn is_member(&self, client: ClientId) -> bool {
        self.adverts.contains_key(&client)
    }

    /// `client` and the members it shares with.
    pub fn neighbourhood(&self, client: ClientId) -> BTreeSet<ClientId> {
        self.graph.neighbourhood(client, &self.adverts)
    }

    /// The roster `client` is sent: its neighbourhood's adverts (every member's over the
    /// complete graph).
    pub fn roster_for(&self, client: ClientId) -> BTreeMap<ClientId, Advert> {
        let hood = self.neighbourhood(client).into_iter();
        hood.filter_map(|v| self.adverts.get(&v).map(|a| (v, *a)))
            .collect()
    }

    /// The threshold `client`'s shares are split at: the complete graph's, or more than half
    /// of its neighbourhood.
    pub fn threshold_of(&self, client: ClientId) -> usize {
        match self.graph {
            Graph::Complete => self.threshold,
            Graph::Sparse(_) => self.neighbourhood(client).len() / 2 + 1,
        }
    }

    /// The members `client` masked with (itself, and those of its neighbourhood that shared
    /// their keys); empty before it shared its own.
    fn masked_with(&self, client: ClientId) -> BTreeSet<ClientId> {
        if !self.mail.contains_key(&client) {
            return BTreeSet::new();
        }
        let hood = self.neighbourhood(client);
        hood.into_iter()
            .filter(|v| self.mail.contains_key(v))
            .collect()
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
        if self.adverts.len() >= MAX_SPARSE_GROUP && !self.adverts.contains_key(&client) {
            return refuse(format!(
                "client {client}'s keys past {MAX_SPARSE_GROUP} clients"
            ));
        }
        // A copied or degenerate key would make every honest client refuse the roster.
        let keys = [advert.mask_key, advert.envelope_key];
        let taken = |k: &[u8; 32]| self.key_owners.get(k).is_some_and(|&c| c != client);
        if keys[0] == keys[1] || keys.iter().any(taken) {
            return refuse(format!("client {client}'s keys are another's"));
        }
        if keys.iter().any(crypto::is_low_order) {
            return refuse(format!("client {client}'s key is of low order"));
        }
        if let Some(old) = self.adverts.insert(client, advert) {
            self.key_owners.remove(&old.mask_key);
            self.key_owners.remove(&old.envelope_key);
        }
        self.key_owners.extend(keys.map(|k| (k, client)));
        Ok(())
    }

    /// Closes U1 and draws its graph: every member's keys (each member is sent its
    /// [`SecAggServer::neighbourhood`]'s).
    pub fn roster(&mut self) -> Result<BTreeMap<ClientId, Advert>> {
        self.expect(Stage::Advertising)?;
        let degree = self.degree.or(graph::default_degree(self.adverts.len()));
        let graph = Graph::draw(&self.adverts, degree, self.round);
        if graph == Graph::Complete {
            self.at_threshold(self.adverts.len(), "advertised keys")?;
        }
        self.graph = graph;
        self.stage = Stage::Sharing;
        Ok(self.adverts.clone())
    }

    /// A stage's count against the threshold (under SecAgg+ the least neighbourhood's: each
    /// neighbourhood's own is checked where the stage closes).
    fn at_threshold(&self, count: usize, what: &str) -> Result<()> {
        let threshold = self.threshold();
        match count >= threshold {
            true => Ok(()),
            false => refuse(format!(
                "{count} clients {what}, under the threshold {threshold}: the round cannot end"
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
        let mut others = self.neighbourhood(client);
        others.remove(&client);
        if sealed.keys().copied().collect::<BTreeSet<_>>() != others {
            return refuse(format!(
                "client {client}'s shares are not one for each other member of its neighbourhood"
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

    /// Closes U2: for each of its members the envelopes the others of U2 in its neighbourhood
    /// sealed to it. Each member needs its threshold of them (with itself), or its masks could
    /// not be taken out.
    pub fn inboxes(&mut self) -> Result<BTreeMap<ClientId, BTreeMap<ClientId, Vec<u8>>>> {
        self.expect(Stage::Sharing)?;
        self.at_threshold(self.mail.len(), "shared their keys")?;
        for &v in self.mail.keys() {
            let with = self.masked_with(v).len();
            if with < self.threshold_of(v) {
                return refuse(format!(
                    "{with} of client {v}'s neighbourhood shared their keys, under its threshold {}: the round cannot end",
                    self.threshold_of(v)
                ));
            }
        }
        self.stage = Stage::Masking;
        Ok(self
            .mail
            .keys()
            .map(|&v| {
                let inbox = self
                    .masked_with(v)
                    .into_iter()
                    .filter(|&u| u != v)
                    .map(|u| (u, self.mail[&u][&v].clone()))
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

    /// Closes U3: the survivors (each member of U3 is sent [`SecAggServer::survivors_for`]).
    /// Refused where a secret could not be rebuilt (a survivor's self-mask seed or a dropped
    /// member's mask key with fewer than its threshold of surviving holders), or where the
    /// survivors fall into pieces of the graph (each piece's sum would show).
    pub fn survivors(&mut self) -> Result<BTreeSet<ClientId>> {
        self.expect(Stage::Masking)?;
        self.at_threshold(self.masked.len(), "sent masked inputs")?;
        let survivors: BTreeSet<ClientId> = self.masked.keys().copied().collect();
        for &u in self.mail.keys().filter(|&&u| self.is_needed(u)) {
            let holders = self.masked_with(u).intersection(&survivors).count();
            if holders < self.threshold_of(u) {
                return refuse(format!(
                    "{holders} of client {u}'s share holders survived, under its threshold {}: the round cannot end",
                    self.threshold_of(u)
                ));
            }
        }
        if !self.graph.connects(&survivors) {
            return refuse(
                "the survivors fall into pieces of the graph, whose sums unmasking would show: \
                 the round cannot end",
            );
        }
        self.stage = Stage::Unmasking;
        Ok(survivors)
    }

    /// Whether the sum needs `u`'s secret rebuilt: a survivor's self-mask seed, or the mask key
    /// of a member gone after sharing with which some survivor masked.
    fn is_needed(&self, u: ClientId) -> bool {
        self.masked.contains_key(&u) || !self.survivors_for(u).is_empty()
    }

    /// The survivors `client` holds shares of: what it is sent to unmask.
    pub fn survivors_for(&self, client: ClientId) -> BTreeSet<ClientId> {
        let with = self.masked_with(client);
        with.into_iter()
            .filter(|v| self.masked.contains_key(v))
            .collect()
    }

    /// Whether the replies so far rebuild every secret the sum needs: each survivor's seed and
    /// each dropped member's key from its threshold of holders.
    pub fn can_sum(&self) -> bool {
        self.stage == Stage::Unmasking && self.short_secret().is_none()
    }

    /// The first member whose secret too few holders have replied for: its holders that
    /// replied, and its threshold.
    fn short_secret(&self) -> Option<(ClientId, usize, usize)> {
        self.mail
            .keys()
            .filter(|&&u| self.is_needed(u))
            .find_map(|&u| {
                let with = self.masked_with(u);
                let replied = with.iter().filter(|c| self.replies.contains_key(c)).count();
                let threshold = self.threshold_of(u);
                (replied < threshold).then_some((u, replied, threshold))
            })
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
        let with = self.masked_with(client);
        let (survivors, dropped): (BTreeSet<ClientId>, BTreeSet<ClientId>) =
            with.into_iter().partition(|u| self.masked.contains_key(u));
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

    /// The sum of the survivors' inputs, each secret from the first threshold of its holders'
    /// replies in id order: each survivor's self-mask and each dropped client's pairwise masks
    /// rebuilt and taken out. A reconstruction that does not match what its client advertised
    /// is refused.
    pub fn sum(&self) -> Result<Vec<u32>> {
        self.expect(Stage::Unmasking)?;
        if let Some((u, replied, threshold)) = self.short_secret() {
            return refuse(format!(
                "{replied} clients sent their shares, under the threshold {threshold} (of client \
                 {u}'s secret): the round cannot end"
            ));
        }
        let mut sum = vec![0u32; self.len];
        for (&u, y) in &self.masked {
            ring::add(&mut sum, y);
            let shares = self.shares_of(u, |r| r.seed_shares.get(&u));
            let seed = crypto::combine(&shares)?;
            if crypto::digest(&seed) != self.adverts[&u].self_mask_digest {
                return refuse(format!(
                    "the shares of client {u}'s self-mask do not rebuild it"
                ));
            }
            ring::sub(&mut sum, &crypto::mask(&seed, self.len));
        }
        for &v in self.mail.keys().filter(|v| !self.masked.contains_key(v)) {
            self.take_out_dropped(v, &mut sum)?;
        }
        Ok(sum)
    }

    /// The first threshold of `u`'s shares that its holders' replies hold, in id order.
    fn shares_of<'a>(
        &'a self,
        u: ClientId,
        pick: impl Fn(&'a Unmasking) -> Option<&'a Vec<u8>>,
    ) -> Vec<Vec<u8>> {
        self.replies
            .values()
            .filter_map(pick)
            .take(self.threshold_of(u))
            .cloned()
            .collect()
    }

    /// Client `v` shared its keys and sent no input: every survivor's pairwise mask with it is
    /// still in the sum, rebuilt from `v`'s mask key.
    fn take_out_dropped(&self, v: ClientId, sum: &mut [u32]) -> Result<()> {
        if !self.is_needed(v) {
            return Ok(());
        }
        let shares = self.shares_of(v, |r| r.key_shares.get(&v));
        let key = KeyPair::from_secret(crypto::combine(&shares)?);
        if key.public != self.adverts[&v].mask_key {
            return refuse(format!(
                "the shares of client {v}'s mask key do not rebuild it"
            ));
        }
        for u in self.survivors_for(v) {
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
