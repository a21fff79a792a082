//! Data helpers the driver tests share (plaintext and TLS clusters alike): `key:<i>` =
//! `value-<i>` written and read back through a cluster client.

use fred::prelude::KeysInterface;
use futures::{StreamExt, TryStreamExt};

pub fn key(i: usize) -> String {
    format!("key:{i}")
}

pub async fn write_keys(client: &fred::clients::Client, count: usize) {
    futures::stream::iter(0..count)
        .map(|i| async move {
            client
                .set::<(), _, _>(key(i), format!("value-{i}"), None, None, false)
                .await
                .map_err(|e| format!("SET {}: {e}", key(i)))
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await
        .unwrap_or_else(|e| panic!("writing {count} keys: {e}"));
}

pub async fn assert_keys_readable(client: &fred::clients::Client, count: usize) {
    let missing: Vec<String> = futures::stream::iter(0..count)
        .map(|i| async move {
            let got: Option<String> = client
                .get(key(i))
                .await
                .unwrap_or_else(|e| panic!("GET {}: {e}", key(i)));
            (got.as_deref() != Some(format!("value-{i}").as_str())).then(|| key(i))
        })
        .buffer_unordered(64)
        .filter_map(|m| async move { m })
        .collect()
        .await;
    assert!(
        missing.is_empty(),
        "{} of {count} keys missing or wrong, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}
