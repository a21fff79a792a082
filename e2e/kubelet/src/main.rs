//! `vk-kubelet`: our kubelet for the local cluster (the library: `vk_kubelet`).
//!
//! ```text
//! vk-kubelet --kubeconfig $LC_DIR/kubeconfig --state-dir $LC_DIR/kubelet \
//!            --image-map $LC_DIR/images.yaml --nodes 3
//! vk-kubelet cleanup --state-dir $LC_DIR/kubelet
//! ```

use std::net::Ipv4Addr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use vk_kubelet::state::{StateDir, lc_dir};

#[derive(Parser, Debug)]
#[command(
    name = "vk-kubelet",
    about = "Runs Kubernetes pods as local processes in network namespaces"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Kubeconfig with rights over nodes, leases, pods, configmaps, secrets, tokens (default $LC_DIR/kubeconfig).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// State dir (default $LC_DIR/kubelet).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Image map file (default $LC_DIR/images.yaml).
    #[arg(long)]
    image_map: Option<PathBuf>,
    /// Number of nodes (node-a, node-b, ...).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Port of the first node's kubelet endpoint; the next nodes use the following ports.
    #[arg(long, default_value_t = 10250)]
    base_port: u16,
    /// Address the kubelet endpoints listen on (the nodes' InternalIP).
    #[arg(long, default_value = "198.18.0.1")]
    listen_ip: Ipv4Addr,
    /// Cluster DNS Service IP written into pods' resolv.conf (dnsPolicy ClusterFirst); without
    /// it pods use the node's resolver.
    #[arg(long)]
    cluster_dns: Option<Ipv4Addr>,
    /// Cluster domain of the search path.
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Remove every pod netns (vkp-*), veth (vkh*), leftover container process and pod state.
    Cleanup {
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Internal: runs inside `ip netns exec` to mount volumes and exec a container.
    #[command(hide = true)]
    ExecContainer { spec: PathBuf },
}

fn main() {
    let cli = Cli::parse();
    if let Some(Cmd::ExecContainer { spec }) = &cli.cmd {
        // No tracing, no runtime: this process becomes the container.
        let e = vk_kubelet::launch::exec_container(spec);
        eprintln!("vk-kubelet exec-container: {e:#}");
        std::process::exit(1);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn,hyper=warn,tower=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let res = rt.block_on(async move {
        match cli.cmd {
            Some(Cmd::Cleanup { state_dir }) => {
                let sd = state_dir
                    .or(cli.state_dir)
                    .map(StateDir::new)
                    .unwrap_or_else(StateDir::default_location);
                vk_kubelet::cleanup::cleanup(&sd).await
            }
            Some(Cmd::ExecContainer { .. }) => Ok(()),
            None => {
                let cfg = vk_kubelet::Config {
                    kubeconfig: cli
                        .kubeconfig
                        .unwrap_or_else(|| lc_dir().join("kubeconfig")),
                    state_dir: cli.state_dir.unwrap_or_else(|| lc_dir().join("kubelet")),
                    image_map: cli
                        .image_map
                        .unwrap_or_else(|| lc_dir().join("images.yaml")),
                    nodes: cli.nodes,
                    base_port: cli.base_port,
                    listen_ip: cli.listen_ip,
                    cluster_dns: cli.cluster_dns.map(|server| vk_kubelet::dns::ClusterDns {
                        server,
                        domain: cli.cluster_domain.clone(),
                    }),
                };
                vk_kubelet::run(cfg).await
            }
        }
    });
    if let Err(e) = res {
        eprintln!("vk-kubelet: {e:#}");
        std::process::exit(1);
    }
}
