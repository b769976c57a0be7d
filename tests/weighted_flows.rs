//! Weighted flows (`FluidNet::add_bundle`): one flow standing for k members must give, member for
//! member and bit for bit, what k separate flows give, both while the members are fixed in the same
//! filling round and after a solve splits the bundle because they would not be. Checked by running
//! the same traffic on small fat-trees twice, bundled and unbundled, to the last completion.

use dagsim::sim::fluid::{FlowId, FluidNet};
use std::collections::{BTreeMap, HashMap};

/// A two-tier fat-tree: `hosts` hosts under leaves of `per_leaf`, every leaf wired to every spine.
/// Links: host up, host down (per host), then leaf->spine up and spine->leaf down (per pair).
struct FatTree {
    hosts: u32,
    per_leaf: u32,
    spines: u32,
}

impl FatTree {
    fn leaves(&self) -> u32 {
        self.hosts / self.per_leaf
    }
    fn links(&self) -> usize {
        (2 * self.hosts + 2 * self.leaves() * self.spines) as usize
    }
    fn capacities(&self, host: f64, spine: f64) -> Vec<f64> {
        let mut c = vec![host; 2 * self.hosts as usize];
        c.resize(self.links(), spine);
        c
    }
    /// Route from host a to host b through spine s (ignored inside a leaf).
    fn route(&self, a: u32, b: u32, s: u32) -> Vec<u32> {
        let (la, lb) = (a / self.per_leaf, b / self.per_leaf);
        let up = |h: u32| 2 * h;
        let down = |h: u32| 2 * h + 1;
        let base = 2 * self.hosts;
        if la == lb {
            return vec![up(a), down(b)];
        }
        let leaf_up = base + 2 * (la * self.spines + s);
        let spine_down = base + 2 * (lb * self.spines + s) + 1;
        vec![up(a), leaf_up, spine_down, down(b)]
    }
}

/// A flow to start: at `start`, `bytes` over `route`, at most `cap`; flows with the same `group`
/// (and the same start, bytes and cap) form one bundle in the bundled run.
#[derive(Clone)]
struct Spec {
    start: u64,
    bytes: f64,
    cap: f64,
    route: Vec<u32>,
    group: Option<u32>,
}

/// Runs `specs` to completion; returns each spec's end instant and the splits seen.
fn run(capacity: &[f64], specs: &[Spec], bundled: bool) -> (Vec<u64>, usize) {
    let mut net = FluidNet::new(capacity.to_vec());
    // Starts by instant, each entry a list of spec groups (one spec each unless bundled).
    let mut starts: BTreeMap<u64, Vec<Vec<usize>>> = BTreeMap::new();
    let mut groups: BTreeMap<(u64, u32), Vec<usize>> = BTreeMap::new();
    for (i, s) in specs.iter().enumerate() {
        match (bundled, s.group) {
            (true, Some(g)) => groups.entry((s.start, g)).or_default().push(i),
            _ => starts.entry(s.start).or_default().push(vec![i]),
        }
    }
    for ((t, _), members) in groups {
        starts.entry(t).or_default().push(members);
    }
    let mut members_of: HashMap<FlowId, Vec<usize>> = HashMap::new();
    let mut completions: BTreeMap<u64, Vec<(FlowId, u32)>> = BTreeMap::new();
    let mut end = vec![u64::MAX; specs.len()];
    let mut splits = 0;
    let mut out = Vec::new();
    loop {
        let next_start = starts.keys().next().copied();
        let next_done = completions.keys().next().copied();
        let now = match (next_start, next_done) {
            (None, None) => break,
            (a, b) => a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX)),
        };
        for (f, version) in completions.remove(&now).unwrap_or_default() {
            if net.is_live(f) && net.version(f) == version {
                for &m in &members_of.remove(&f).expect("a live flow has members") {
                    end[m] = now;
                }
                net.remove(f);
            }
        }
        for group in starts.remove(&now).unwrap_or_default() {
            let s = &specs[group[0]];
            let routes: Vec<&[u32]> = group.iter().map(|&i| specs[i].route.as_slice()).collect();
            let f = if routes.len() == 1 {
                net.add(routes[0], s.bytes, s.cap, now)
            } else {
                net.add_bundle(&routes, s.bytes, s.cap, now)
            };
            assert_eq!(net.members(f) as usize, group.len());
            members_of.insert(f, group);
        }
        out.clear();
        net.solve(now, &mut out);
        for split in net.take_splits() {
            splits += 1;
            let members = members_of.remove(&split.bundle).expect("a split bundle was live");
            assert_eq!(members.len(), split.members.len());
            for (&f, m) in split.members.iter().zip(members) {
                assert_eq!(net.members(f), 1);
                members_of.insert(f, vec![m]);
            }
        }
        for c in &out {
            assert!(c.time >= now);
            completions.entry(c.time).or_default().push((c.flow, c.version));
        }
    }
    assert!(end.iter().all(|&e| e != u64::MAX), "every flow ended");
    (end, splits)
}

/// Runs both ways and checks every member ended at the same instant; returns the splits.
fn same_both_ways(capacity: &[f64], specs: &[Spec]) -> usize {
    let (plain, none) = run(capacity, specs, false);
    assert_eq!(none, 0);
    let (bundled, splits) = run(capacity, specs, true);
    assert_eq!(plain, bundled, "bundled run differs from the unbundled one");
    splits
}

fn spec(start: u64, bytes: f64, route: Vec<u32>, group: Option<u32>) -> Spec {
    Spec { start, bytes, cap: f64::INFINITY, route, group }
}

#[test]
fn a_bundle_over_a_shared_spine_is_its_members_and_stays_whole() {
    // Four flows from leaf 0's hosts to leaf 1's through spine 0 share the 2:1 uplink (4 members
    // at 0.5 each, hosts at 1.0), with a plain flow joining the uplink mid-way and a flow inside
    // a leaf: every member is fixed by the shared links in every solve, so no split.
    let tree = FatTree { hosts: 8, per_leaf: 4, spines: 2 };
    let cap = tree.capacities(1.0, 2.0);
    let mut specs: Vec<Spec> = (0..4).map(|h| spec(0, 1_000.0, tree.route(h, h + 4, 0), Some(0))).collect();
    specs.push(spec(300, 500.0, tree.route(0, 5, 0), None));
    specs.push(spec(100, 700.0, tree.route(6, 7, 0), None));
    assert_eq!(same_both_ways(&cap, &specs), 0);
}

#[test]
fn members_held_by_their_own_links_together_leave_the_rest_of_a_shared_link() {
    // Host links at 0.5 hold both members (each by its own uplink, in the same round), so the
    // bundle stays whole and the spine uplink (2.0) keeps 2.0 - 2 x 0.5 for a plain flow from a
    // faster host: that flow must get 1.0 in both runs (one subtraction per member).
    let tree = FatTree { hosts: 8, per_leaf: 4, spines: 2 };
    let mut cap = tree.capacities(0.5, 2.0);
    cap[2 * 2] = 4.0; // host 2's uplink
    cap[2 * 6 + 1] = 4.0; // host 6's down link
    let mut specs: Vec<Spec> = (0..2).map(|h| spec(0, 1_000.0, tree.route(h, h + 4, 0), Some(0))).collect();
    specs.push(spec(0, 1_000.0, tree.route(2, 6, 0), None));
    assert_eq!(same_both_ways(&cap, &specs), 0);
    let (end, _) = run(&cap, &specs, true);
    assert_eq!(end, vec![2_000, 2_000, 1_000]);
}

#[test]
fn a_bundle_splits_where_one_members_own_link_is_busier() {
    // Member 0's host uplink carries three other flows, so it is held at 0.25 while the others get
    // the uplink's 2/4: the bundle must split in its first solve, and still match.
    let tree = FatTree { hosts: 8, per_leaf: 4, spines: 2 };
    let cap = tree.capacities(1.0, 2.0);
    let mut specs: Vec<Spec> = (0..4).map(|h| spec(0, 1_000.0, tree.route(h, h + 4, 0), Some(0))).collect();
    for b in 1..4 {
        specs.push(spec(0, 400.0 * b as f64, tree.route(0, b, 0), None));
    }
    assert_eq!(same_both_ways(&cap, &specs), 1);
}

#[test]
fn a_bundle_splits_later_when_traffic_reaches_one_member() {
    // Whole at first; at t = 200 a flow into member 2's destination host makes that member's own
    // down link the bottleneck: the split happens in a later solve, in the bundle's state then.
    let tree = FatTree { hosts: 8, per_leaf: 4, spines: 2 };
    let cap = tree.capacities(1.0, 2.0);
    let mut specs: Vec<Spec> = (0..4).map(|h| spec(0, 1_000.0, tree.route(h, h + 4, 0), Some(0))).collect();
    specs.push(spec(200, 900.0, tree.route(5, 6, 0), None));
    specs.push(spec(200, 900.0, tree.route(4, 6, 0), None));
    assert_eq!(same_both_ways(&cap, &specs), 1);
}

#[test]
fn capped_bundles_and_bundles_of_one_match_separate_flows() {
    let tree = FatTree { hosts: 8, per_leaf: 4, spines: 2 };
    let cap = tree.capacities(1.0, 2.0);
    let mut specs: Vec<Spec> =
        (0..3).map(|h| Spec { cap: 0.3, ..spec(0, 600.0, tree.route(h, h + 4, 1), Some(0)) }).collect();
    specs.push(spec(50, 600.0, tree.route(3, 7, 1), Some(1)));
    specs.push(spec(0, 800.0, tree.route(2, 6, 1), None));
    assert_eq!(same_both_ways(&cap, &specs), 0);
}

/// A small deterministic generator (64-bit LCG, Knuth's MMIX constants).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn random_traffic_on_fat_trees_matches_bundled_or_split() {
    // Random fat-trees (2-3 spines, 2:1 or 1:1 uplinks), bundles of leaf-to-leaf flows through one
    // spine, background flows at random instants, some capped; across seeds both outcomes occur.
    let (mut whole, mut split) = (0, 0);
    for seed in 0..60u64 {
        let mut rng = Lcg(seed * 7919 + 1);
        let tree = FatTree { hosts: 16, per_leaf: 4, spines: 2 + rng.next(2) as u32 };
        let cap = tree.capacities(1.0 + rng.next(3) as f64 * 0.5, [2.0, 4.0][rng.next(2) as usize]);
        let mut specs = Vec::new();
        for g in 0..1 + rng.next(3) as u32 {
            let k = 2 + rng.next(3) as u32;
            let (la, lb) = (rng.next(4) as u32, rng.next(4) as u32);
            let lb = if la == lb { (lb + 1) % 4 } else { lb };
            let (start, bytes, s) =
                (rng.next(400), 200.0 + rng.next(2_000) as f64, rng.next(tree.spines as u64) as u32);
            let capped = if rng.next(4) == 0 { 0.2 + rng.next(5) as f64 * 0.1 } else { f64::INFINITY };
            for m in 0..k {
                let route = tree.route(la * 4 + m, lb * 4 + m, s);
                specs.push(Spec { start, bytes, cap: capped, route, group: Some(g) });
            }
        }
        for _ in 0..rng.next(10) {
            let (a, b) = (rng.next(16) as u32, rng.next(16) as u32);
            let b = if a == b { (b + 1) % 16 } else { b };
            let route = tree.route(a, b, rng.next(tree.spines as u64) as u32);
            specs.push(spec(rng.next(800), 100.0 + rng.next(1_500) as f64, route, None));
        }
        if same_both_ways(&cap, &specs) > 0 {
            split += 1;
        } else {
            whole += 1;
        }
    }
    assert!(whole > 0 && split > 0, "both kept and split bundles were exercised ({whole} whole, {split} split)");
}
