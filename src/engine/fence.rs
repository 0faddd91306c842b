//! Fencing over a quorum: the bakery rule.
//!
//! Each store counts grants per name. A majority's answers may differ (a store missed grants
//! while it was down), so the lease takes the highest per name, and every granting store that
//! is behind is raised to it before the fence is handed out. Any later majority shares a store
//! with this one, whose counter is now at least the fence, so later fences are higher.

use crate::store::{Granted, Previous};

/// Per name: the highest fence among the grants, and how the previous lease ended (the most
/// pessimistic answer wins, `Previous`'s order: expired over failed over released over none,
/// and a failed end with its status over one without; a child told "expired" re-checks its
/// work, which is always safe).
pub fn merge(grants: &[&[Granted]]) -> Vec<Granted> {
    let Some(first) = grants.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|j| Granted {
            fence: grants.iter().map(|g| g[j].fence).max().unwrap_or(0),
            previous: grants
                .iter()
                .map(|g| g[j].previous)
                .max()
                .unwrap_or(Previous::None),
            started: grants.iter().filter_map(|g| g[j].started).min(),
        })
        .collect()
}

/// Whether a store's grant is behind the merged fences and must be raised.
pub fn behind(grant: &[Granted], merged: &[Granted]) -> bool {
    grant.iter().zip(merged).any(|(g, m)| g.fence < m.fence)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(fence: u64, previous: Previous) -> Granted {
        Granted {
            fence,
            previous,
            started: None,
        }
    }

    #[test]
    fn takes_the_highest_fence_and_the_worst_previous() {
        let a = [g(5, Previous::Released), g(1, Previous::None)];
        let b = [g(9, Previous::Expired), g(1, Previous::None)];
        let m = merge(&[&a, &b]);
        assert_eq!(m, vec![g(9, Previous::Expired), g(1, Previous::None)]);
        assert!(behind(&a, &m));
        assert!(!behind(&b, &m));
    }

    #[test]
    fn a_failed_end_outweighs_a_clean_one_and_keeps_its_status() {
        let a = [g(5, Previous::Failed(Some(3)))];
        let b = [g(5, Previous::Failed(None))];
        let c = [g(5, Previous::Released)];
        let m = merge(&[&b, &a, &c]);
        assert_eq!(m[0].previous, Previous::Failed(Some(3)));
        let d = [g(5, Previous::Expired)];
        assert_eq!(merge(&[&a, &d])[0].previous, Previous::Expired);
    }
}
