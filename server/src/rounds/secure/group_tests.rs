//! A secure round of TPFL (its §5, Algorithm 2, per cluster): each client declares its
//! confidence winner, the clients of one class sum their weights among themselves, a cluster
//! too small to hide its members is left out, and each cluster's download is its members' mean
//! as the plain round computes it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use flint_common::config::{RoundPolicy, Selection};
use flint_common::secagg::SecAggClient;
use flint_common::strategy::ServerStrategy;
use flint_common::strategy::tpfl::{TpflHyper, TpflServer};
use flint_common::wire::proto::DataSummary;
use flint_common::wire::{Update, Winner};
use flint_common::{ClientId, FlintError};
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::super::{Rounds, Task};
use super::{Answer, SecureSettings, Step};

const CLAUSES: usize = 4;
const CLASSES: usize = 3;

fn tpfl() -> TpflServer {
    TpflServer::new(CLASSES, CLAUSES, TpflHyper::default())
}

fn joined(t0: Instant, clients: u32) -> Rounds {
    let policy = RoundPolicy {
        rounds: 2,
        min_clients: clients as usize,
        min_updates: 1,
        round_timeout: Duration::from_secs(10),
        eval_timeout: Duration::from_secs(5),
        selection: Selection::everyone(),
        abandon_short: false,
    };
    let settings = SecureSettings {
        bound: 1e6,
        stage_timeout: Duration::from_secs(5),
        nonce: 5,
        degree: None,
    };
    let mut r = Rounds::new(policy, Box::new(tpfl()), CLASSES)
        .with_features(Some(8))
        .with_secagg(Some(settings));
    for id in 1..=clients {
        let s = DataSummary {
            train_class_counts: vec![5; CLASSES],
            test_samples: 4,
            features: 8,
            compute_ghz: 1.0,
        };
        r.join(id, s, t0).unwrap();
    }
    r
}

/// Client `id`'s winning weights.
fn weights(id: ClientId) -> Vec<i32> {
    let x = id as i32;
    vec![x, -3 * x, 7, x * x]
}

/// Every client through the protocol in its declared class; what each was answered at the
/// keys' stage (an error where its cluster was left out).
fn secure_round(
    r: &mut Rounds,
    classes: &BTreeMap<ClientId, u32>,
    t0: Instant,
) -> BTreeMap<ClientId, Result<(), FlintError>> {
    let mut rng = StdRng::from_seed([3; 32]);
    let mut clients = BTreeMap::new();
    let mut adverts = BTreeMap::new();
    for (&id, &class) in classes {
        let (c, advert) = SecAggClient::new(id, 1, &mut rng);
        let stepped = r
            .secure_step(id, 1, 0, Step::Advert(advert, class), t0)
            .unwrap();
        assert!(stepped.closed.is_none());
        clients.insert(id, c);
        adverts.insert(id, (advert, class));
    }
    let mut rosters = BTreeMap::new();
    let mut answered = BTreeMap::new();
    for (&id, &(advert, class)) in &adverts {
        match r.secure_answer(id, 1, 0, &Step::Advert(advert, class)) {
            Ok(Some((session, Answer::Roster(roster)))) => {
                rosters.insert(id, (session, roster));
                answered.insert(id, Ok(()));
            }
            Ok(other) => panic!("client {id}: {other:?}"),
            Err(e) => {
                answered.insert(id, Err(e));
            }
        }
    }
    let steps = |r: &mut Rounds, step: &dyn Fn(ClientId) -> Step| {
        for (&id, (session, _)) in &rosters {
            let stepped = r.secure_step(id, 1, *session, step(id), t0).unwrap();
            if let Some(job) = stepped.closed {
                r.install(job.run(), t0);
            }
        }
    };
    let mut sealed = BTreeMap::new();
    for (&id, (_, roster)) in &rosters {
        let c = clients.get_mut(&id).unwrap();
        let s = c
            .share_keys(roster.members.clone(), roster.threshold, &mut rng)
            .unwrap();
        sealed.insert(id, s);
    }
    steps(r, &|id| Step::Shares(sealed[&id].clone()));
    let mut masked = BTreeMap::new();
    for (&id, (session, roster)) in &rosters {
        let Ok(Some((_, Answer::Inbox(inbox)))) =
            r.secure_answer(id, 1, *session, &Step::Shares(BTreeMap::new()))
        else {
            panic!("client {id}'s inbox");
        };
        assert!(
            inbox.keys().all(|u| roster.members.contains_key(u)),
            "an inbox from its group alone"
        );
        let x: Vec<f64> = weights(id)
            .iter()
            .map(|&v| f64::from(v) * roster.weights[&id])
            .collect();
        let encoded = roster.fixed.encode(&x).unwrap();
        let y = clients
            .get_mut(&id)
            .unwrap()
            .masked_input(inbox, &encoded)
            .unwrap();
        assert_ne!(y, encoded, "the server never holds an input in the clear");
        masked.insert(id, y);
    }
    steps(r, &|id| Step::Masked(masked[&id].clone()));
    let mut unmasking = BTreeMap::new();
    for (&id, (session, _)) in &rosters {
        let Ok(Some((_, Answer::Survivors(s)))) =
            r.secure_answer(id, 1, *session, &Step::Masked(Vec::new()))
        else {
            panic!("client {id}'s survivors");
        };
        unmasking.insert(id, clients.get_mut(&id).unwrap().unmask(&s).unwrap());
    }
    steps(r, &|id| Step::Unmasking(unmasking[&id].clone()));
    answered
}

/// What the plain round sends each client, from every update in the clear.
fn plain_downloads(classes: &BTreeMap<ClientId, u32>) -> BTreeMap<ClientId, Vec<u8>> {
    let updates: BTreeMap<ClientId, Update> = classes
        .iter()
        .map(|(&id, &class)| {
            let w = Winner {
                class,
                confidence: 1.0,
                weights: weights(id),
            };
            (id, Update::Winner(w))
        })
        .collect();
    let agg = tpfl().aggregate(1, &BTreeMap::new(), &updates).unwrap();
    let flint_common::strategy::Downloads::PerClient(d) = agg.downloads else {
        panic!("tpfl sends per client");
    };
    d.into_iter()
        .map(|(c, p)| (c, prost::Message::encode_to_vec(&p)))
        .collect()
}

fn download(r: &Rounds, client: ClientId) -> Option<Vec<u8>> {
    match r.task_for(client, 1) {
        Task::Train { download, .. } => download.map(|p| prost::Message::encode_to_vec(&p)),
        other => panic!("round 2 is open: {other:?}"),
    }
}

#[test]
fn each_cluster_sums_its_own_members_and_a_cluster_of_two_is_left_out() {
    let t0 = Instant::now();
    let classes: BTreeMap<ClientId, u32> = [
        (1, 0),
        (2, 0),
        (3, 0),
        (4, 2),
        (5, 2),
        (6, 2),
        (7, 2),
        (8, 1),
        (9, 1),
    ]
    .into();
    let mut r = joined(t0, 9);
    let answered = secure_round(&mut r, &classes, t0);
    for id in [8, 9] {
        let e = answered[&id].as_ref().unwrap_err().to_string();
        assert!(e.contains("fewer than 3"), "{e}");
    }
    assert_eq!(r.history()[0].participants, (1..=7).collect::<Vec<_>>());
    let summed: BTreeMap<ClientId, u32> = classes
        .iter()
        .filter(|(c, _)| **c <= 7)
        .map(|(c, k)| (*c, *k))
        .collect();
    let plain = plain_downloads(&summed);
    for id in 1..=7 {
        assert_eq!(download(&r, id).as_ref(), Some(&plain[&id]), "client {id}");
    }
    for id in [8, 9] {
        assert_eq!(download(&r, id), None, "client {id} keeps its own weights");
    }
    let members: BTreeSet<u32> = r.history()[0].participants.iter().copied().collect();
    assert_eq!(members.len(), 7);
}

#[test]
fn a_group_beyond_the_runs_classes_or_a_second_group_is_refused() {
    let t0 = Instant::now();
    let mut r = joined(t0, 3);
    let mut rng = StdRng::from_seed([4; 32]);
    let (_, advert) = SecAggClient::new(1, 1, &mut rng);
    let e = r
        .secure_step(1, 1, 0, Step::Advert(advert, 3), t0)
        .err()
        .unwrap();
    assert!(e.to_string().contains("declares group 3"), "{e}");
    assert!(r.secure_step(1, 1, 0, Step::Advert(advert, 1), t0).is_ok());
    let e = r
        .secure_step(1, 1, 0, Step::Advert(advert, 2), t0)
        .err()
        .unwrap();
    assert!(e.to_string().contains("declared group 1"), "{e}");
}
