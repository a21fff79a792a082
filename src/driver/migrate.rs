//! Key-by-key slot moves (`SETSLOT IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT NODE`): the way
//! to move slots on servers without atomic slot migration, and the way to finish a move of
//! that kind that was cut short. Every step is safe to run again, so a move interrupted
//! anywhere (operator crash, timeout) is resumed by running it again with the same arguments.

use std::time::Duration;

use super::{ClusterDriver, DriverResult, MemberAddr, MigrateKeys, NodeId, SetSlot};

/// One slot's journey from a source primary to a target primary.
#[derive(Clone, Copy, Debug)]
pub struct KeyMove<'a> {
    pub source: &'a MemberAddr,
    pub source_id: &'a NodeId,
    pub target: &'a MemberAddr,
    pub target_id: &'a NodeId,
    /// Other primaries, told the slot's new owner at the end (gossip would get there too,
    /// but later; until then they redirect clients to the old owner).
    pub others: &'a [MemberAddr],
}

/// Keys fetched and migrated per `GETKEYSINSLOT`/`MIGRATE` round trip.
pub const KEYS_PER_BATCH: u32 = 200;
/// Valkey's own I/O timeout for one `MIGRATE` transfer.
pub const MIGRATE_TIMEOUT: Duration = Duration::from_secs(5);

/// Moves one slot with its keys; returns how many keys moved. Clients keep working
/// throughout: the source answers for keys it still has and sends `ASK` for the others.
pub async fn move_slot_by_keys(
    driver: &dyn ClusterDriver,
    mv: KeyMove<'_>,
    slot: u16,
) -> DriverResult<u64> {
    // The target first: once the source says MIGRATING, clients are sent to the target with
    // ASK, which the target only honours while IMPORTING.
    match driver
        .set_slot(mv.target, slot, &SetSlot::Importing(mv.source_id.clone()))
        .await
    {
        Ok(()) => {}
        // Already moved (the move was cut short after the target took the slot): finish
        // telling everybody.
        Err(e)
            if e.server_message()
                .is_some_and(|m| m.contains("already the owner")) =>
        {
            announce_owner(driver, mv, slot).await?;
            return Ok(0);
        }
        Err(e) => return Err(e),
    }
    driver
        .set_slot(mv.source, slot, &SetSlot::Migrating(mv.target_id.clone()))
        .await?;
    let mut moved = 0;
    loop {
        let keys = driver.keys_in_slot(mv.source, slot, KEYS_PER_BATCH).await?;
        if keys.is_empty() {
            break;
        }
        moved += keys.len() as u64;
        driver
            .migrate_keys(
                mv.source,
                &MigrateKeys {
                    target: mv.target.clone(),
                    keys,
                    timeout: MIGRATE_TIMEOUT,
                    // A MIGRATE whose reply was lost may have left a copy on the target while
                    // the source kept (and served) its own: without REPLACE every retry fails
                    // with BUSYKEY and the move is wedged. The source's copy is the one to keep.
                    replace: true,
                },
            )
            .await?;
    }
    announce_owner(driver, mv, slot).await?;
    Ok(moved)
}

/// `SETSLOT slot NODE target` on the target, then the source, then everyone else.
async fn announce_owner(
    driver: &dyn ClusterDriver,
    mv: KeyMove<'_>,
    slot: u16,
) -> DriverResult<()> {
    let owner = SetSlot::Node(mv.target_id.clone());
    driver.set_slot(mv.target, slot, &owner).await?;
    driver.set_slot(mv.source, slot, &owner).await?;
    for other in mv
        .others
        .iter()
        .filter(|o| *o != mv.source && *o != mv.target)
    {
        // Best effort: a primary that misses it learns the owner by gossip.
        let _ = driver.set_slot(other, slot, &owner).await;
    }
    Ok(())
}
