//! The protocol end to end in one process, every message passed by hand: the sum is exact with
//! and without dropouts at each stage, the server holds only masked inputs, and what would let it
//! see one input is refused.

use std::collections::{BTreeMap, BTreeSet};

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::ring::{self, FixedPoint};
use super::*;

const LEN: usize = 50;

/// Client `id`'s input: distinct, signed, within ±1.
fn input(id: ClientId) -> Vec<f64> {
    (0..LEN)
        .map(|i| (id as f64 * 7.3 + i as f64 * 1.7).sin())
        .collect()
}

/// Where a client stops answering: after advertising, after sharing, after its masked input.
#[derive(Clone, Copy, PartialEq)]
enum LeavesAfter {
    Advert,
    Shares,
    Input,
}

struct Outcome {
    sum: Result<Vec<u32>>,
    server: SecAggServer,
    encoded: BTreeMap<ClientId, Vec<u32>>,
}

/// Runs one round for `clients` with `threshold`, the `drops` leaving where they say.
fn round(clients: u32, threshold: usize, drops: &[(ClientId, LeavesAfter)]) -> Outcome {
    round_over(clients, threshold, None, |_| drops.to_vec())
}

/// Runs one round for `clients` over a graph of `degree` (each client sent its neighbourhood's
/// roster, threshold and survivors), the clients `drops` names once the graph is drawn leaving
/// where it says.
fn round_over(
    clients: u32,
    threshold: usize,
    degree: Option<usize>,
    drops: impl Fn(&SecAggServer) -> Vec<(ClientId, LeavesAfter)>,
) -> Outcome {
    let codec = FixedPoint::for_sums(1.0, clients as usize).unwrap();
    let mut rng = StdRng::from_seed([3; 32]);
    let mut server = SecAggServer::new(4, threshold, LEN).with_degree(degree);
    let mut members = BTreeMap::new();
    for id in 1..=clients {
        let (c, advert) = SecAggClient::new(id, 4, &mut rng);
        server.advertise(id, advert).unwrap();
        members.insert(id, c);
    }
    server.roster().unwrap();
    let drops: BTreeMap<ClientId, LeavesAfter> = drops(&server).into_iter().collect();
    let stays =
        |id: &ClientId, past: LeavesAfter| drops.get(id).is_none_or(|d| *d as u8 > past as u8);
    for (id, c) in members
        .iter_mut()
        .filter(|(id, _)| stays(id, LeavesAfter::Advert))
    {
        let own = server.roster_for(*id);
        let sealed = c.share_keys(own, server.threshold_of(*id), &mut rng);
        server.share(*id, sealed.unwrap()).unwrap();
    }
    let inboxes = match server.inboxes() {
        Ok(i) => i,
        Err(e) => {
            return Outcome {
                sum: Err(e),
                server,
                encoded: BTreeMap::new(),
            };
        }
    };
    let mut encoded = BTreeMap::new();
    for (id, inbox) in inboxes {
        if !stays(&id, LeavesAfter::Shares) {
            continue;
        }
        let x = codec.encode(&input(id)).unwrap();
        let y = members
            .get_mut(&id)
            .unwrap()
            .masked_input(inbox, &x)
            .unwrap();
        server.masked(id, y).unwrap();
        encoded.insert(id, x);
    }
    let survivors = match server.survivors() {
        Ok(s) => s,
        Err(e) => {
            return Outcome {
                sum: Err(e),
                server,
                encoded,
            };
        }
    };
    for &id in survivors.iter().filter(|id| stays(id, LeavesAfter::Input)) {
        let own = server.survivors_for(id);
        let reply = members.get_mut(&id).unwrap().unmask(&own).unwrap();
        server.unmasking(id, reply).unwrap();
    }
    Outcome {
        sum: server.sum(),
        server,
        encoded,
    }
}

fn plain_sum(encoded: &BTreeMap<ClientId, Vec<u32>>) -> Vec<u32> {
    let mut sum = vec![0; LEN];
    encoded.values().for_each(|x| ring::add(&mut sum, x));
    sum
}

#[test]
fn with_no_one_dropping_the_unmasked_sum_is_the_plain_sum_exactly() {
    let out = round(6, 4, &[]);
    assert_eq!(out.encoded.len(), 6);
    assert_eq!(out.sum.unwrap(), plain_sum(&out.encoded));
}

#[test]
fn clients_dropping_at_every_stage_leave_the_sum_of_those_whose_inputs_arrived() {
    // 3 never shares, 5 shares and sends no input, 2 sends its input and no shares back.
    let drops = [
        (3, LeavesAfter::Advert),
        (5, LeavesAfter::Shares),
        (2, LeavesAfter::Input),
    ];
    let out = round(7, 4, &drops);
    assert_eq!(
        out.encoded.keys().copied().collect::<Vec<_>>(),
        [1, 2, 4, 6, 7],
        "client 2's input arrived before it left"
    );
    let sum = out.sum.unwrap();
    assert_eq!(sum, plain_sum(&out.encoded));
    let codec = FixedPoint::for_sums(1.0, 7).unwrap();
    let expected: f64 = [1, 2, 4, 6, 7].iter().map(|&id| input(id)[0]).sum();
    assert!((codec.decode(&sum)[0] - expected).abs() < 5.0 / codec.scale);
}

#[test]
fn the_server_holds_no_input_in_the_clear() {
    let out = round(4, 3, &[(2, LeavesAfter::Shares)]);
    for (id, held) in out.server.held_inputs() {
        let clear = &out.encoded[id];
        let same = held.iter().zip(clear).filter(|(a, b)| a == b).count();
        assert!(
            same <= 1,
            "client {id}'s input shows through in {same} of {LEN} values"
        );
    }
}

#[test]
fn too_few_clients_at_any_stage_end_the_round_with_a_clear_refusal() {
    let out = round(
        5,
        3,
        &[
            (1, LeavesAfter::Advert),
            (2, LeavesAfter::Advert),
            (3, LeavesAfter::Advert),
        ],
    );
    let e = out.sum.unwrap_err().to_string();
    assert!(
        e.contains("2 clients shared their keys, under the threshold 3"),
        "{e}"
    );
    let out = round(
        5,
        3,
        &[
            (1, LeavesAfter::Input),
            (2, LeavesAfter::Input),
            (3, LeavesAfter::Input),
        ],
    );
    let e = out.sum.unwrap_err().to_string();
    assert!(
        e.contains("2 clients sent their shares, under the threshold 3"),
        "{e}"
    );
    assert!(check_threshold(3, 6).is_err(), "half is not more than half");
    assert!(check_threshold(4, 6).is_ok());
    assert!(check_threshold(200, 256).is_err(), "over 255");
}

#[test]
fn a_client_reveals_once_and_never_both_shares_of_one_client() {
    let mut rng = StdRng::from_seed([9; 32]);
    let mut server = SecAggServer::new(1, 2, 4);
    let mut clients: BTreeMap<ClientId, SecAggClient> = BTreeMap::new();
    for id in 1..=3 {
        let (c, a) = SecAggClient::new(id, 1, &mut rng);
        server.advertise(id, a).unwrap();
        clients.insert(id, c);
    }
    let roster = server.roster().unwrap();
    for (id, c) in clients.iter_mut() {
        server
            .share(*id, c.share_keys(roster.clone(), 2, &mut rng).unwrap())
            .unwrap();
    }
    let inboxes = server.inboxes().unwrap();
    let c1 = clients.get_mut(&1).unwrap();
    c1.masked_input(inboxes[&1].clone(), &[1, 2, 3, 4]).unwrap();
    let first = c1.unmask(&BTreeSet::from([1, 2])).unwrap();
    assert_eq!(
        first.seed_shares.keys().copied().collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(first.key_shares.keys().copied().collect::<Vec<_>>(), [3]);
    // A server that then says 3 survived, to get 3's seed share beside its key share: refused.
    // Asked again for the same survivors (a reply lost): the same shares, nothing more.
    assert_eq!(c1.unmask(&BTreeSet::from([1, 2])).unwrap(), first);
    let e = c1.unmask(&BTreeSet::from([1, 3])).unwrap_err().to_string();
    assert!(e.contains("a second time"), "{e}");
}

#[test]
fn malformed_or_misaddressed_messages_are_refused_and_change_nothing() {
    let mut rng = StdRng::from_seed([5; 32]);
    let mut server = SecAggServer::new(2, 2, 3);
    let (mut c1, a1) = SecAggClient::new(1, 2, &mut rng);
    let (mut c2, a2) = SecAggClient::new(2, 2, &mut rng);
    server.advertise(1, a1).unwrap();
    server.advertise(1, a1).unwrap();
    assert!(server.advertise(2, a1).is_err(), "another's keys");
    server.advertise(2, a2).unwrap();
    assert!(
        server.masked(1, vec![0; 3]).is_err(),
        "an input before its stage"
    );
    let roster = server.roster().unwrap();
    let from1 = c1.share_keys(roster.clone(), 2, &mut rng).unwrap();
    let mut short = from1.clone();
    short.get_mut(&2).unwrap().pop();
    assert!(
        server.share(1, short).is_err(),
        "an envelope of another size"
    );
    assert!(
        server.share(1, BTreeMap::new()).is_err(),
        "no envelope for client 2"
    );
    server.share(1, from1.clone()).unwrap();
    server
        .share(2, c2.share_keys(roster, 2, &mut rng).unwrap())
        .unwrap();
    let inboxes = server.inboxes().unwrap();
    // Client 2 given client 1's envelope tampered with: it does not open.
    let mut tampered = inboxes[&2].clone();
    tampered.get_mut(&1).unwrap()[0] ^= 1;
    assert!(c2.masked_input(tampered, &[0; 3]).is_err());
    let y1 = c1.masked_input(inboxes[&1].clone(), &[1, 2, 3]).unwrap();
    assert!(
        server.masked(1, vec![0; 4]).is_err(),
        "an input of another length"
    );
    server.masked(1, y1).unwrap();
    assert!(server.masked(3, vec![0; 3]).is_err(), "a stranger's input");
}

#[test]
fn a_roster_that_leaves_out_the_client_or_repeats_a_key_is_refused() {
    let mut rng = StdRng::from_seed([6; 32]);
    let (mut c1, a1) = SecAggClient::new(1, 1, &mut rng);
    let (_, a2) = SecAggClient::new(2, 1, &mut rng);
    let without = BTreeMap::from([(2, a2), (3, a2)]);
    assert!(c1.share_keys(without, 2, &mut rng).is_err());
    let repeated = BTreeMap::from([(1, a1), (2, a1)]);
    let e = c1
        .share_keys(repeated, 2, &mut rng)
        .unwrap_err()
        .to_string();
    assert!(e.contains("two keys are the same"), "{e}");
}

#[test]
fn a_repeated_step_gets_the_same_answer_and_an_altered_one_is_refused() {
    let mut rng = StdRng::from_seed([8; 32]);
    let mut server = SecAggServer::new(1, 2, 2);
    let (mut c1, a1) = SecAggClient::new(1, 1, &mut rng);
    let (mut c2, a2) = SecAggClient::new(2, 1, &mut rng);
    let e = c1.masked_input(BTreeMap::new(), &[1, 2]).unwrap_err();
    assert!(
        e.to_string().contains("before this client shared its keys"),
        "{e}"
    );
    server.advertise(1, a1).unwrap();
    let e = server.advertise(2, a1).unwrap_err().to_string();
    assert!(e.contains("keys are another's"), "{e}");
    let low = Advert {
        mask_key: [0; 32],
        ..a2
    };
    let e = server.advertise(2, low).unwrap_err().to_string();
    assert!(e.contains("low order"), "{e}");
    server.advertise(2, a2).unwrap();
    let roster = server.roster().unwrap();
    // Sealed once: a retry gets the same envelopes, not a second sealing under the same key.
    let sealed = c1.share_keys(roster.clone(), 2, &mut rng).unwrap();
    assert_eq!(c1.share_keys(roster.clone(), 2, &mut rng).unwrap(), sealed);
    let mut other = roster.clone();
    other.remove(&2);
    assert!(c1.share_keys(other, 2, &mut rng).is_err());
    server.share(1, sealed).unwrap();
    server
        .share(2, c2.share_keys(roster, 2, &mut rng).unwrap())
        .unwrap();
    let inbox = server.inboxes().unwrap()[&1].clone();
    let y = c1.masked_input(inbox.clone(), &[1, 2]).unwrap();
    assert_eq!(c1.masked_input(inbox, &[1, 2]).unwrap(), y);
    let e = c1.masked_input(BTreeMap::new(), &[1, 2]).unwrap_err();
    assert!(e.to_string().contains("a second inbox"), "{e}");
}

/// SecAgg+ (Bell et al. 2020, §3): 300 clients, each sharing with 8 neighbours of a Harary
/// graph, sum exactly as the complete graph would, with clients leaving after their shares and
/// after their inputs; each client seals 8 envelopes, not 299.
#[test]
fn over_a_sparse_graph_the_unmasked_sum_is_the_plain_sum_exactly() {
    let drops = |_: &SecAggServer| {
        let mut d: Vec<_> = (1..=300)
            .step_by(37)
            .map(|id| (id, LeavesAfter::Shares))
            .collect();
        d.extend((5..=300).step_by(41).map(|id| (id, LeavesAfter::Input)));
        d
    };
    let out = round_over(300, 151, Some(8), drops);
    assert_eq!(out.encoded.len(), 300 - 9, "nine left after their shares");
    assert_eq!(out.sum.unwrap(), plain_sum(&out.encoded));
    for id in [1, 150, 300] {
        let hood = out.server.neighbourhood(id);
        assert_eq!(hood.len(), 9, "client {id} and its 8 neighbours");
        assert_eq!(out.server.threshold_of(id), 5);
    }
}

/// The graph is k-regular and symmetric, drawn alike from the same keys, and complete where k
/// reaches every other member; the default degree is complete up to 255 members.
#[test]
fn the_graph_is_regular_symmetric_and_drawn_from_the_keys() {
    use super::graph::{Graph, default_degree};
    let mut rng = StdRng::from_seed([2; 32]);
    let adverts: BTreeMap<ClientId, Advert> = (1..=40)
        .map(|id| (id, SecAggClient::new(id, 1, &mut rng).1))
        .collect();
    let g = Graph::draw(&adverts, Some(6), 1);
    let Graph::Sparse(n) = &g else {
        panic!("6 neighbours of 40 is sparse")
    };
    for (u, vs) in n {
        assert_eq!(vs.len(), 6, "client {u}");
        assert!(!vs.contains(u) && vs.iter().all(|v| n[v].contains(u)));
    }
    assert_eq!(Graph::draw(&adverts, Some(6), 1), g);
    assert_ne!(
        Graph::draw(&adverts, Some(6), 2),
        g,
        "another round, another order"
    );
    assert!(g.connects(&adverts.keys().copied().collect()));
    assert_eq!(Graph::draw(&adverts, Some(39), 1), Graph::Complete);
    assert_eq!(default_degree(255), None);
    assert_eq!(default_degree(256), Some(32));
    assert_eq!(default_degree(1000), Some(40));
    assert_eq!(default_degree(10_000), Some(54));
}

/// Survivors in two pieces of the graph would let unmasking show each piece's sum (the masks
/// between the pieces belong to no one who is left): the round is refused before any share is
/// revealed.
#[test]
fn survivors_that_fall_apart_in_the_graph_are_refused() {
    // A ring (2 neighbours each) of 10: client 1 and one not next to it leave after sharing.
    let drops = |server: &SecAggServer| {
        let hood = server.neighbourhood(1);
        let far = (2..=10).find(|v| !hood.contains(v)).unwrap();
        vec![(1, LeavesAfter::Shares), (far, LeavesAfter::Shares)]
    };
    let out = round_over(10, 6, Some(2), drops);
    let e = out.sum.unwrap_err().to_string();
    assert!(e.contains("fall into pieces"), "{e}");
    assert_eq!(
        out.server.stage(),
        server::Stage::Masking,
        "no share asked for"
    );
}
