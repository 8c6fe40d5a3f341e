//! Work split over the machine's cores: runs of consecutive items, one run a thread, the first on
//! the calling thread. Each item is handled on its own, so what a caller computes does not depend
//! on the number of threads.

/// The machine's cores, or 1 where they cannot be told.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `each(i, &mut items[i])` for every item, on up to `threads` threads (0 counts as 1).
pub fn each_mut<T: Send>(items: &mut [T], threads: usize, each: impl Fn(usize, &mut T) + Sync) {
    let per = items
        .len()
        .div_ceil(threads.clamp(1, items.len().max(1)))
        .max(1);
    let each = &each;
    let run = move |first: usize, run: &mut [T]| {
        for (i, item) in run.iter_mut().enumerate() {
            each(first + i, item);
        }
    };
    std::thread::scope(|scope| {
        let mut runs = items.chunks_mut(per).enumerate();
        let first = runs.next();
        for (r, items) in runs {
            scope.spawn(move || run(r * per, items));
        }
        if let Some((_, items)) = first {
            run(0, items);
        }
    });
}

/// `f` of every item, in the items' order, computed on up to `threads` threads.
pub fn map<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let mut slots: Vec<Option<R>> = items.iter().map(|_| None).collect();
    each_mut(&mut slots, threads, |i, slot| *slot = Some(f(&items[i])));
    slots.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_once_with_its_index_for_any_thread_count() {
        for threads in [0, 1, 2, 3, 7, 64] {
            for len in [0, 1, 5, 16] {
                let mut items = vec![(usize::MAX, 0u32); len];
                each_mut(&mut items, threads, |i, item| {
                    item.0 = i;
                    item.1 += 1;
                });
                let want: Vec<_> = (0..len).map(|i| (i, 1)).collect();
                assert_eq!(items, want, "{threads} threads, {len} items");
            }
        }
    }

    #[test]
    fn map_keeps_the_items_order() {
        let items: Vec<u64> = (0..37).collect();
        for threads in [1, 2, 5, 40] {
            let squares = map(&items, threads, |x| x * x);
            assert_eq!(squares, items.iter().map(|x| x * x).collect::<Vec<_>>());
        }
    }
}
