//! Helpers for backends that send batches over the network.

/// Splits `items` into consecutive runs of at most `max` bytes each, as
/// `size` counts an item's bytes, so that a very large batch can travel in
/// several statements while an ordinary one stays one. Each run holds at
/// least one item (an item larger than `max` is a run of its own); items
/// keep their order; an empty slice gives no runs.
///
/// ```
/// use jobstore_api::batch::split_by_size;
///
/// let sizes = [3, 4, 2, 9, 1];
/// let runs = split_by_size(&sizes, 8, |&n| n);
/// assert_eq!(runs, vec![&[3, 4][..], &[2], &[9], &[1]]);
/// ```
pub fn split_by_size<T>(items: &[T], max: usize, size: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0usize);
    for (i, item) in items.iter().enumerate() {
        let n = size(item);
        if i > start && bytes.saturating_add(n) > max {
            runs.push(&items[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes = bytes.saturating_add(n);
    }
    if start < items.len() {
        runs.push(&items[start..]);
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::split_by_size;
    use proptest::prelude::*;

    fn lens(runs: &[&[usize]]) -> Vec<usize> {
        runs.iter().map(|r| r.len()).collect()
    }

    #[test]
    fn a_run_fills_up_to_exactly_the_maximum() {
        assert_eq!(lens(&split_by_size(&[4, 4, 4, 4], 8, |&n| n)), [2, 2]);
        assert_eq!(lens(&split_by_size(&[4, 4, 1], 8, |&n| n)), [2, 1]);
        assert_eq!(lens(&split_by_size(&[8, 0, 0, 1], 8, |&n| n)), [3, 1]);
    }

    #[test]
    fn an_item_over_the_maximum_is_a_run_of_its_own() {
        assert_eq!(lens(&split_by_size(&[9], 8, |&n| n)), [1]);
        assert_eq!(lens(&split_by_size(&[1, 9, 1], 8, |&n| n)), [1, 1, 1]);
    }

    #[test]
    fn nothing_gives_no_runs_and_zero_sized_items_one() {
        assert!(split_by_size(&[] as &[usize], 8, |&n| n).is_empty());
        assert_eq!(lens(&split_by_size(&[0; 5], 0, |&n| n)), [5]);
    }

    #[test]
    fn sizes_near_usize_max_do_not_overflow() {
        let big = usize::MAX - 1;
        assert_eq!(lens(&split_by_size(&[big, big, 1], big, |&n| n)), [1, 1, 1]);
        assert_eq!(lens(&split_by_size(&[big, 1], usize::MAX, |&n| n)), [2]);
    }

    proptest! {
        /// The runs cover the items in order, each run holds at least one
        /// item and at most `max` bytes unless it is one item, and no run
        /// could have taken the next run's first item.
        #[test]
        fn runs_are_greedy_and_cover_everything(
            sizes in proptest::collection::vec(0usize..20, 0..40),
            max in 0usize..40,
        ) {
            let runs = split_by_size(&sizes, max, |&n| n);
            let joined: Vec<usize> = runs.iter().flat_map(|r| r.iter().copied()).collect();
            prop_assert_eq!(&joined, &sizes);
            for (k, run) in runs.iter().enumerate() {
                prop_assert!(!run.is_empty());
                let total: usize = run.iter().sum();
                prop_assert!(total <= max || run.len() == 1, "run {k} of {total} bytes");
                if let Some(next) = runs.get(k + 1) {
                    prop_assert!(total + next[0] > max, "run {k} stopped early");
                }
            }
        }
    }
}
