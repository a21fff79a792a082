//! The plan step's one piece of I/O: where the pure planner runs. Large clusters are planned on
//! a blocking thread so the async runtime keeps answering admission, the lease and `/healthz`.

use crate::plan::{self, Plan, Topology};

/// Clusters with at least this many members are planned on a blocking thread. Planning is
/// pure CPU work that grows with the members times the members each one knows (a formed
/// 1000-member cluster reports a million node entries), and the runtime's worker threads (as
/// many as cores: two on a small node) also answer admission, renew the lease and serve
/// `/healthz`: a few large clusters planned in place would stall all three. Below this, a
/// plan takes microseconds and handing it to another thread costs more than it saves.
const PLAN_IN_PLACE_BELOW: usize = 50;

/// Plans `topology`, off the async runtime when it is large (see [`PLAN_IN_PLACE_BELOW`]);
/// hands the topology back for the steps after planning.
pub async fn plan_off_the_runtime(topology: Topology) -> (Topology, Plan) {
    if topology.members.len() < PLAN_IN_PLACE_BELOW {
        let plan = plan::plan(&topology);
        return (topology, plan);
    }
    off_the_runtime(move || {
        let plan = plan::plan(&topology);
        (topology, plan)
    })
    .await
}

/// Runs `work` on tokio's blocking pool while this task waits without holding a worker
/// thread; a panic in `work` is resumed here, as if it had run in place.
pub async fn off_the_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
