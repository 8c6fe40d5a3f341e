//! One job at a time handed from a leading thread to one helper thread, and waited for, by
//! spinning on two counters: when a job takes a few microseconds (one class's update on one
//! example), a sleep and a wake per job would cost more than the job.
//!
//! Memory ordering: the leader stores a job's two words (`Relaxed`), then its generation with
//! `Release`; the helper loads the generation with `Acquire`, so it sees the words stored before
//! it. The helper stores `done` with `Release` after the job, and the leader loads it with
//! `Acquire`, so whatever the job wrote is visible to the leader once it has waited for it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The generation that tells the helper to stop.
const STOP: u64 = u64::MAX;

#[derive(Debug, Default)]
pub struct Handoff {
    generation: AtomicU64,
    done: AtomicU64,
    job: [AtomicUsize; 2],
}

impl Handoff {
    /// Leader: hands the helper `job` as generation `g` (1, 2, … in order).
    pub fn give(&self, g: u64, job: (usize, usize)) {
        debug_assert!(g != STOP && g > self.generation.load(Ordering::Relaxed));
        self.job[0].store(job.0, Ordering::Relaxed);
        self.job[1].store(job.1, Ordering::Relaxed);
        self.generation.store(g, Ordering::Release);
    }

    /// Leader: waits until the helper has finished generation `g`.
    pub fn wait_done(&self, g: u64) {
        spin_until(&self.done, |v| v == g);
    }

    /// Leader: tells the helper to return once it is idle.
    pub fn stop(&self) {
        self.generation.store(STOP, Ordering::Release);
    }

    /// Helper: runs `work` on each job as it is given, until [`Handoff::stop`].
    pub fn serve(&self, mut work: impl FnMut((usize, usize))) {
        let mut seen = 0;
        loop {
            let g = spin_until(&self.generation, |v| v != seen);
            if g == STOP {
                return;
            }
            let job = (
                self.job[0].load(Ordering::Relaxed),
                self.job[1].load(Ordering::Relaxed),
            );
            work(job);
            seen = g;
            self.done.store(g, Ordering::Release);
        }
    }
}

/// Spins until `until` holds of `flag`, yielding the core now and then.
fn spin_until(flag: &AtomicU64, until: impl Fn(u64) -> bool) -> u64 {
    let mut spins = 0u32;
    loop {
        let v = flag.load(Ordering::Acquire);
        if until(v) {
            return v;
        }
        spins += 1;
        if spins.is_multiple_of(1024) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn every_job_runs_once_in_order_and_is_done_before_the_leader_goes_on() {
        let handoff = Handoff::default();
        let seen = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            scope.spawn(|| handoff.serve(|job| seen.lock().unwrap().push(job)));
            for g in 1..=1000u64 {
                let job = (g as usize, 2 * g as usize);
                handoff.give(g, job);
                handoff.wait_done(g);
                // The job's effect is there as soon as the wait returns.
                assert_eq!(seen.lock().unwrap().last(), Some(&job));
            }
            handoff.stop();
        });
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 1000);
        assert!(
            seen.iter()
                .enumerate()
                .all(|(n, &(a, b))| a == n + 1 && b == 2 * a)
        );
    }

    #[test]
    fn a_helper_given_nothing_stops() {
        let handoff = Handoff::default();
        std::thread::scope(|scope| {
            scope.spawn(|| handoff.serve(|_| panic!("no job was given")));
            handoff.stop();
        });
    }
}
