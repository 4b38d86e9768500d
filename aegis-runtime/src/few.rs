//! `Few`: a list that holds one item without allocating.
//!
//! Most supersteps run one activation (every step of a chain), so the
//! barrier's lists (results, finished activations, writes, a merge's
//! fields) usually hold one item each; a `Vec` would allocate for each of
//! them on every superstep. A leaf module: it imports nothing from the
//! crate, so every folder may use it.

/// Zero, one, or many items, in order; allocates only from the second.
#[derive(Debug, Default)]
pub(crate) enum Few<T> {
    #[default]
    Zero,
    One(T),
    Many(Vec<T>),
}

impl<T> Few<T> {
    pub(crate) fn push(&mut self, item: T) {
        *self = match std::mem::take(self) {
            Few::Zero => Few::One(item),
            Few::One(first) => Few::Many(vec![first, item]),
            Few::Many(mut items) => {
                items.push(item);
                Few::Many(items)
            }
        };
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        match self {
            Few::Zero => &[],
            Few::One(item) => std::slice::from_ref(item),
            Few::Many(items) => items,
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            Few::Zero => &mut [],
            Few::One(item) => std::slice::from_mut(item),
            Few::Many(items) => items,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.as_slice().iter()
    }
}

impl<T> FromIterator<T> for Few<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut iter = iter.into_iter();
        let Some(first) = iter.next() else {
            return Few::Zero;
        };
        let Some(second) = iter.next() else {
            return Few::One(first);
        };
        let mut items = Vec::with_capacity(iter.size_hint().0.saturating_add(2));
        items.push(first);
        items.push(second);
        items.extend(iter);
        Few::Many(items)
    }
}

impl<T> Extend<T> for Few<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        for item in iter {
            self.push(item);
        }
    }
}

impl<T> From<Vec<T>> for Few<T> {
    fn from(mut items: Vec<T>) -> Self {
        match items.len() {
            0 => Few::Zero,
            1 => items.pop().map_or(Few::Zero, Few::One),
            _ => Few::Many(items),
        }
    }
}

impl<T> From<Few<T>> for Vec<T> {
    fn from(few: Few<T>) -> Self {
        match few {
            Few::Zero => Vec::new(),
            Few::One(item) => vec![item],
            Few::Many(items) => items,
        }
    }
}

impl<T> IntoIterator for Few<T> {
    type Item = T;
    type IntoIter = FewIter<T>;

    fn into_iter(self) -> FewIter<T> {
        match self {
            Few::Zero => FewIter::Few(None),
            Few::One(item) => FewIter::Few(Some(item)),
            Few::Many(items) => FewIter::Many(items.into_iter()),
        }
    }
}

/// The owning iterator of a [`Few`].
pub(crate) enum FewIter<T> {
    Few(Option<T>),
    Many(std::vec::IntoIter<T>),
}

impl<T> Iterator for FewIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match self {
            FewIter::Few(item) => item.take(),
            FewIter::Many(items) => items.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            FewIter::Few(item) => {
                let n = usize::from(item.is_some());
                (n, Some(n))
            }
            FewIter::Many(items) => items.size_hint(),
        }
    }
}

impl<T> ExactSizeIterator for FewIter<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_through_every_shape() {
        let mut few = Few::default();
        assert_eq!(few.len(), 0);
        for i in 0..5 {
            few.push(i);
            assert_eq!(few.as_slice(), (0..=i).collect::<Vec<_>>().as_slice());
        }
        few.as_mut_slice().reverse();
        assert_eq!(few.into_iter().collect::<Vec<_>>(), vec![4, 3, 2, 1, 0]);
        let one: Few<u8> = std::iter::once(7).collect();
        assert!(matches!(one, Few::One(7)));
        assert_eq!(one.into_iter().len(), 1);
        let none: Few<u8> = std::iter::empty().collect();
        assert!(matches!(none, Few::Zero));
        for n in 0..4 {
            let few = Few::from((0..n).collect::<Vec<u8>>());
            assert_eq!(few.len(), usize::from(n));
            assert!(matches!(
                (n, &few),
                (0, Few::Zero) | (1, Few::One(0)) | (2.., Few::Many(_))
            ));
            assert_eq!(Vec::from(few), (0..n).collect::<Vec<u8>>());
        }
        let mut many: Few<u8> = (0..3).collect();
        many.extend([3, 4]);
        assert_eq!(
            many.iter().copied().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
    }
}
