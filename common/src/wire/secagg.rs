//! Secure aggregation's messages ⇄ the protocol's types ([`crate::secagg`]): every key, share
//! and envelope checked for its size, every id for repeats, before the protocol sees it.

use std::collections::BTreeMap;

use super::proto::{SecAggAdvert, SecAggEnvelope, SecAggUnmasking};
use crate::secagg::{Advert, Unmasking};
use crate::{ClientId, FlintError, Result};

pub fn advert_to_proto(a: &Advert) -> SecAggAdvert {
    SecAggAdvert {
        envelope_key: a.envelope_key.to_vec(),
        mask_key: a.mask_key.to_vec(),
        self_mask_digest: a.self_mask_digest.to_vec(),
        group: 0,
    }
}

pub fn advert_from_proto(a: &SecAggAdvert) -> Result<Advert> {
    let key = |b: &[u8], what: &str| -> Result<[u8; 32]> {
        b.try_into().map_err(|_| {
            FlintError::InvalidRequest(format!(
                "secure aggregation: a {what} of {} bytes, not 32",
                b.len()
            ))
        })
    };
    Ok(Advert {
        envelope_key: key(&a.envelope_key, "envelope key")?,
        mask_key: key(&a.mask_key, "mask key")?,
        self_mask_digest: key(&a.self_mask_digest, "self-mask digest")?,
    })
}

pub fn envelopes_to_proto(m: &BTreeMap<ClientId, Vec<u8>>) -> Vec<SecAggEnvelope> {
    m.iter()
        .map(|(&client_id, sealed)| SecAggEnvelope {
            client_id,
            sealed: sealed.clone(),
        })
        .collect()
}

/// Envelopes by client, at most `most` of them, none longer than `max_bytes`, no client twice.
pub fn envelopes_from_proto(
    v: &[SecAggEnvelope],
    most: usize,
    max_bytes: usize,
) -> Result<BTreeMap<ClientId, Vec<u8>>> {
    let refuse = |m: String| {
        Err(FlintError::InvalidRequest(format!(
            "secure aggregation: {m}"
        )))
    };
    if v.len() > most {
        return refuse(format!("{} envelopes, more than {most}", v.len()));
    }
    let mut out = BTreeMap::new();
    for e in v {
        if e.sealed.len() > max_bytes {
            return refuse(format!("an envelope of {} bytes", e.sealed.len()));
        }
        if out.insert(e.client_id, e.sealed.clone()).is_some() {
            return refuse(format!("two envelopes for client {}", e.client_id));
        }
    }
    Ok(out)
}

pub fn unmasking_to_proto(u: &Unmasking) -> SecAggUnmasking {
    SecAggUnmasking {
        seed_shares: envelopes_to_proto(&u.seed_shares),
        key_shares: envelopes_to_proto(&u.key_shares),
    }
}

pub fn unmasking_from_proto(u: &SecAggUnmasking, most: usize) -> Result<Unmasking> {
    let share = crate::secagg::crypto::SHARE_BYTES;
    Ok(Unmasking {
        seed_shares: envelopes_from_proto(&u.seed_shares, most, share)?,
        key_shares: envelopes_from_proto(&u.key_shares, most, share)?,
    })
}
