//! Connecting: one connection type over a single server and a cluster,
//! opening a [`RedisStore`], and the clients of the nodes (pub/sub,
//! maintenance).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jobstore_api::Result;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::error::map;
use crate::keys::Keys;
use crate::options::{DEFAULT_PREFIX, RedisOptions, Target, validate_prefix};
use crate::store::RedisStore;

/// A cheap-to-clone, multiplexed connection: concurrent commands from
/// clones share the socket(s) and are pipelined on the wire.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl RedisStore {
    pub(crate) async fn open(
        target: Target,
        url_prefix: Option<String>,
        opts: RedisOptions,
    ) -> Result<Self> {
        let prefix = opts
            .prefix
            .clone()
            .or(url_prefix)
            .unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        validate_prefix(&prefix)?;
        let node_urls = match &target {
            Target::Single(url) => vec![url.clone()],
            Target::Cluster(urls) => urls.clone(),
        };
        let (conn, nodes, cluster) = match target {
            Target::Single(url) => {
                let client = redis::Client::open(url.as_str()).map_err(|e| map(e, "URL"))?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(opts.connection_timeout))
                    .set_response_timeout(Some(opts.response_timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let manager = ConnectionManager::new_with_config(client.clone(), config)
                    .await
                    .map_err(|e| map(e, "connect"))?;
                (Conn::Single(manager), vec![client], false)
            }
            Target::Cluster(urls) => {
                let clients = urls
                    .iter()
                    .map(|u| redis::Client::open(u.as_str()).map_err(|e| map(e, "URL")))
                    .collect::<Result<Vec<_>>>()?;
                let cc = ClusterClientBuilder::new(urls)
                    .connection_timeout(opts.connection_timeout)
                    .response_timeout(opts.response_timeout)
                    .retries(3)
                    .build()
                    .map_err(|e| map(e, "cluster URL"))?;
                let conn = cc
                    .get_async_connection()
                    .await
                    .map_err(|e| map(e, "connect to cluster"))?;
                (Conn::Cluster(conn), clients, true)
            }
        };
        Ok(RedisStore {
            conn,
            keys: Keys::new(&prefix),
            opts,
            nodes,
            node_urls,
            cluster,
            claimed: Mutex::new(HashMap::new()),
            flows: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// URLs of the cluster's primaries, from `CLUSTER NODES`, with the seed
    /// URL's scheme and credentials.
    pub(crate) async fn primary_urls(&self) -> Result<Vec<String>> {
        let seed = &self.node_urls[0];
        let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
        let userinfo = rest
            .split('/')
            .next()
            .and_then(|a| a.rsplit_once('@'))
            .map(|(u, _)| format!("{u}@"))
            .unwrap_or_default();
        let mut c = self
            .nodes_conn()
            .await
            .map_err(|e| map(e, "connect to node"))?;
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut c)
            .await
            .map_err(|e| map(e, "CLUSTER NODES"))?;
        Ok(primary_addrs(&text)
            .into_iter()
            .map(|addr| format!("{scheme}://{userinfo}{addr}/"))
            .collect())
    }

    pub(crate) async fn nodes_conn(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        let mut last = None;
        for n in &self.nodes {
            match n.get_multiplexed_async_connection().await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no node"))
        }))
    }

    pub(crate) fn conn(&self) -> Conn {
        self.conn.clone()
    }
}

/// The `host:port` of each primary that a `CLUSTER NODES` reply lists as
/// reachable: flagged `master`, and neither `fail`, `fail?` nor `noaddr`.
fn primary_addrs(nodes: &str) -> Vec<&str> {
    nodes
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let flags = f.get(2)?.split(',');
            let mut primary = false;
            for flag in flags {
                match flag {
                    "master" => primary = true,
                    "fail" | "fail?" | "noaddr" => return None,
                    _ => {}
                }
            }
            // `ip:port@cport` or `ip:port@cport,hostname`
            let addr = f[1].split('@').next().unwrap_or("");
            (primary && !addr.is_empty()).then_some(addr)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn primaries_are_the_reachable_masters_of_cluster_nodes() {
        let nodes = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002,host2 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail - 1426238316232 1426238316232 3 disconnected 10923-16383
824fe116063bc5fcf9f4ffd895bc17aee7731ac3 127.0.0.1:30006@31006 master,fail? - 1426238316232 0 6 connected
5d3ae13c4e5b0c57f5d63e1a6d6c1a9a5c1c3b5e :0@0 master,noaddr - 0 0 7 disconnected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460
";
        assert_eq!(
            super::primary_addrs(nodes),
            ["127.0.0.1:30002", "127.0.0.1:30001"]
        );
        assert!(super::primary_addrs("").is_empty());
        assert!(super::primary_addrs("abc 127.0.0.1:1@2\n").is_empty());
    }
}
