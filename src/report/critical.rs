//! The critical path of a finished run: the chain of tasks that decided when the run ended. Walks
//! back from the last task to finish, each time to whatever released the current task (the
//! predecessor or the previous task on its serial queue that finished last). Reads the DAG and run
//! only; used by timelines and Gantt charts.

use crate::dag::{Dag, TaskId};
use crate::sim::Run;

/// Predecessor lists (the frozen DAG stores successors only).
pub fn predecessors(dag: &Dag) -> Vec<Vec<TaskId>> {
    let mut preds = vec![Vec::new(); dag.len()];
    for t in 0..dag.len() as TaskId {
        for &s in dag.successors(t) {
            preds[s as usize].push(t);
        }
    }
    preds
}

/// For each task, the task that ran just before it on the same serial queue (by start time).
fn queue_predecessors(dag: &Dag, run: &Run) -> Vec<Option<TaskId>> {
    let mut by_queue: Vec<Vec<TaskId>> = vec![Vec::new(); dag.queues().len()];
    for (t, task) in dag.tasks().iter().enumerate() {
        if let Some(q) = task.queue {
            by_queue[q as usize].push(t as TaskId);
        }
    }
    let mut prev = vec![None; dag.len()];
    for tasks in &mut by_queue {
        tasks.sort_by_key(|&t| (run.start[t as usize], t));
        for w in tasks.windows(2) {
            prev[w[1] as usize] = Some(w[0]);
        }
    }
    prev
}

/// The critical path in time order, from a task with no releaser to the last task to finish.
/// Ties go to the lowest task id, so the path is deterministic.
pub fn critical_path(dag: &Dag, run: &Run) -> Vec<TaskId> {
    if dag.is_empty() {
        return Vec::new();
    }
    let preds = predecessors(dag);
    let queue_prev = queue_predecessors(dag, run);
    let mut cur =
        (0..dag.len() as TaskId).max_by_key(|&t| (run.end[t as usize], std::cmp::Reverse(t))).expect("non-empty");
    let mut path = vec![cur];
    loop {
        let start = run.start[cur as usize];
        let releaser = preds[cur as usize]
            .iter()
            .copied()
            .chain(queue_prev[cur as usize])
            .filter(|&p| run.end[p as usize] <= start)
            .max_by_key(|&p| (run.end[p as usize], std::cmp::Reverse(p)));
        match releaser {
            Some(p) => {
                path.push(p);
                cur = p;
            }
            None => break,
        }
    }
    path.reverse();
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dag::{DagBuilder, DagMeta, Discipline, Phase, Task, Work};

    fn task(queue: Option<u32>) -> Task {
        Task {
            work: Work::Fixed { ns: 1 },
            queue,
            phase: Phase::Forward,
            gpu: Some(0),
            iteration: 0,
            layer: None,
            priority: 0,
        }
    }

    fn run(spans: &[(u64, u64)]) -> Run {
        Run {
            start: spans.iter().map(|s| s.0).collect(),
            end: spans.iter().map(|s| s.1).collect(),
            makespan: spans.iter().map(|s| s.1).max().unwrap(),
            link_bytes: Vec::new(),
            events: 0,
            flows: 0,
            flow_records: Vec::new(),
            routes: Vec::new(),
            reserved_collectives: 0,
            materialized_collectives: 0,
            partial_collectives: 0,
            shadowed_transfers: 0,
            shadows_to_flows: 0,
            collective_shadows: 0,
            collective_shadows_to_flows: 0,
            bundles: 0,
            bundled_flows: 0,
            bundle_splits: 0,
            collectives: Vec::new(),
            collective_labels: Vec::new(),
        }
    }

    #[test]
    fn follows_the_latest_releaser_through_edges_and_queues() {
        let mut b = DagBuilder::new();
        let q = b.add_queue("gpu0.compute", Discipline::Fifo, Some(0));
        let short = b.add_task(task(None)); // 0..10
        let long = b.add_task(task(None)); // 0..20
        let join = b.add_task(task(Some(q))); // 25..30: waited for `other` on its queue
        let other = b.add_task(task(Some(q))); // 20..25, no edge to `join`
        b.add_edge(short, join);
        b.add_edge(long, join);
        b.add_edge(long, other);
        let dag = b.build(DagMeta::default()).unwrap();
        let r = run(&[(0, 10), (0, 20), (25, 30), (20, 25)]);
        assert_eq!(critical_path(&dag, &r), vec![long, other, join]);
        assert_eq!(predecessors(&dag)[join as usize], vec![short, long]);
    }
}
