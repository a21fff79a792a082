use super::*;

fn run(commit: &str) -> Metadata {
    Metadata {
        date_utc: "2025-01-02 03:04 UTC".into(),
        commit: commit.into(),
        cores: 2,
        memory_gib: 7.8,
        operator_build: "release".into(),
        valkey_versions: vec!["9.0.0".into(), "9.1.2".into()],
        command: "vk-bench --runs 3".into(),
    }
}

fn formation(floor: f64, operator: f64) -> Formation {
    Formation {
        runs: vec![FormationRun {
            floor_seconds: floor,
            operator_seconds: operator,
        }],
        members_running_seconds: Vec::new(),
    }
}

/// valkey-py with `pause` s and `failed` failed attempts; the bench's writer with `writer` s.
fn real_clients(pause: f64, failed: usize, writer: f64) -> RealClients {
    let client = |name: &str, longest_pause_seconds, failed_attempts| ClientRun {
        client: name.to_string(),
        acknowledged: 1000,
        failed_attempts,
        lost: 0,
        longest_pause_seconds,
        first_failure: (failed_attempts > 0).then(|| "write 7 failed, retrying: EOF".to_string()),
        by_operation: vec![
            DuringOperation {
                failed_attempts,
                longest_pause_seconds,
            },
            DuringOperation::default(),
        ],
    };
    RealClients {
        operations: vec!["scale-out 3 → 4".into(), "scale-in 4 → 3".into()],
        clients: vec![
            client("python (valkey-py)", pause, failed),
            client(BENCH_WRITER, writer, 0),
        ],
        runs: 1,
    }
}

fn fleet(one_cluster: f64, parallelism: u32, settled_200: f64, rss_200: f64) -> Fleet {
    let step = |clusters, added, settled_seconds, operator_rss_mib| FleetStep {
        clusters,
        added,
        settled_seconds,
        operator_rss_mib,
        waiting_for_room: 0,
    };
    Fleet {
        steps: vec![
            step(10, 10, 4.0, 20.0),
            step(50, 40, 9.0, 24.0),
            step(100, 50, 12.0, 28.0),
            step(200, 100, settled_200, rss_200),
        ],
        one_cluster_active_seconds: one_cluster,
        parallelism,
        reconciles_per_minute_at_rest: 3.0,
        rss_at_rest_mib: 30.0,
        sampling: vec![],
    }
}

#[test]
fn sampling_cost_is_reported_as_on_over_off() {
    let mut f = fleet(4.0, 2, 300.0, 40.0);
    assert_eq!(f.sampling_ratios(), None);
    f.sampling = vec![
        SamplingCost {
            sampling: false,
            reconciles_per_minute: 400.0,
            operator_rss_mib: 40.0,
        },
        SamplingCost {
            sampling: true,
            reconciles_per_minute: 410.0,
            operator_rss_mib: 42.0,
        },
    ];
    let (rss, rpm) = f.sampling_ratios().unwrap();
    assert!((rss - 1.05).abs() < 1e-9 && (rpm - 1.025).abs() < 1e-9);
}

fn webhook_kind(name: &str, p99_ms: f64, rate: f64, clusters: usize, failed: usize) -> WebhookKind {
    WebhookKind {
        name: name.into(),
        p50_ms: 1.0,
        p90_ms: 2.0,
        p99_ms,
        max_ms: 9.0,
        requests: 6000,
        failed,
        rate_per_second: rate,
        clusters_present: clusters,
    }
}

fn full_report() -> Report {
    let mut report = Report {
        formation: Some(Formation {
            runs: vec![
                FormationRun {
                    floor_seconds: 2.0,
                    operator_seconds: 2.6,
                },
                FormationRun {
                    floor_seconds: 2.2,
                    operator_seconds: 3.0,
                },
                FormationRun {
                    floor_seconds: 2.1,
                    operator_seconds: 2.9,
                },
            ],
            members_running_seconds: vec![Some(1.5), Some(1.7), None],
        }),
        rollout: Some(Rollout {
            shards: (0..3)
                .map(|i| ShardRollout {
                    floor_seconds: 10.0,
                    operator_seconds: 12.0 + f64::from(i),
                })
                .collect(),
            writer_longest_pause_seconds: Some(0.8),
            runs_worst_ratio: vec![],
        }),
        slot_move: Some(SlotMove {
            keys: 100_000,
            slots_moved: 6553,
            atomic_seconds: 2.4,
            migrateslots_floor_seconds: 2.0,
            key_by_key_seconds: Some(30.0),
            reshard_floor_seconds: Some(28.0),
            scale_out_atomic_seconds: 20.0,
            scale_out_key_by_key_seconds: Some(50.0),
        }),
        fleet: Some(fleet(3.0, 8, 60.0, 36.0)),
        webhook: Some(Webhook {
            kinds: vec![
                webhook_kind("ValkeyRole create", 3.0, 200.0, 200, 0),
                webhook_kind("ValkeyCluster create", 4.5, 200.0, 200, 0),
            ],
        }),
        failover: Some(Failover {
            runs: (0..5)
                .map(|i| FailoverRun {
                    native_floor_seconds: 6.0,
                    operator_sigkill_write_back_seconds: 6.5 + 0.1 * f64::from(i),
                })
                .collect(),
            pod_deleted_write_back_seconds: vec![1.1, 1.3, 1.2],
        }),
        durability: Some(Durability {
            keys: 100_000,
            restart_with_volumes_seconds: 6.3,
            keys_lost_with_volumes: 0,
            restart_memory_only_seconds: 10.5,
            keys_lost_memory_only: 100_000,
            write_seconds: 10.0,
            sets_per_second_with_volumes: 900.0,
            sets_per_second_memory_only: 1000.0,
        }),
        real_clients: Some(real_clients(0.4, 0, 0.2)),
        measured_in: BTreeMap::new(),
    };
    report.stamp(&run("abc1234"));
    report
}

#[test]
fn a_full_report_writes_every_table_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    full_report().write(dir.path()).unwrap();
    let page = std::fs::read_to_string(dir.path().join(MARKDOWN)).unwrap();
    for header in [
        "| Date | Commit | Machine |",
        "| Goal | Figure | Limit | Verdict |",
        "| Run | Floor (s) | Time-to-Active (s) | Ratio |",
        "| Shard | Floor (s) | Operator (s) | Ratio |",
        "| Measure | Operator (s) | Floor (s) | Ratio | Slots/s | Keys/s |",
        "| Clusters | Added | Settled (s) |",
        "| Review | Rate (req/s) |",
        "| Run | Native floor (s) | Operator, SIGKILL (s) | Ratio |",
        "| Measure | Memory-only | Volumes + AOF (everysec) | Ratio |",
        "| Client | Acknowledged writes | Failed attempts | Lost | Longest pause (s) |",
    ] {
        assert!(page.contains(header), "no {header:?} in:\n{page}");
    }
    assert!(!page.contains("Not measured in this run"), "{page}");
    assert!(page.contains("| median | 2.10 | 2.90 | 1.38× |"), "{page}");
    for section in Section::ALL {
        let link = format!("](benchmarks/{}.svg)", section.stem());
        assert!(page.contains(&link), "no {link} in the page");
        let svg = std::fs::read_to_string(
            dir.path()
                .join(FIGURES_DIR)
                .join(format!("{}.svg", section.stem())),
        )
        .unwrap();
        assert!(
            svg.trim_start().starts_with("<svg"),
            "{}: {}",
            section.stem(),
            &svg[..svg.len().min(80)]
        );
        assert!(svg.trim_end().ends_with("</svg>"), "{}", section.stem());
    }
}

#[test]
fn a_partial_report_says_what_it_did_not_measure() {
    let dir = tempfile::tempdir().unwrap();
    let figures = dir.path().join(FIGURES_DIR);
    std::fs::create_dir_all(&figures).unwrap();
    // A plot left from an earlier layout: the page no longer links it.
    std::fs::write(figures.join("fleet.svg"), "<svg/>").unwrap();
    let partial = Report {
        formation: Some(formation(2.0, 2.5)),
        ..Report::default()
    };
    partial.write(dir.path()).unwrap();
    let page = std::fs::read_to_string(dir.path().join(MARKDOWN)).unwrap();
    assert!(page.contains("![Formation](benchmarks/formation.svg)"));
    for section in Section::ALL
        .into_iter()
        .filter(|s| *s != Section::Formation)
    {
        let line = format!(
            "Not measured in this run: `vk-bench --only {}`",
            section.only_flag()
        );
        assert!(page.contains(&line), "no {line:?} in:\n{page}");
        assert!(!figures.join(format!("{}.svg", section.stem())).exists());
    }
    assert!(figures.join("formation.svg").exists());
    let verdicts: Vec<_> = partial.goals().into_iter().map(|g| g.verdict).collect();
    assert_eq!(verdicts[0], Verdict::Met);
    assert!(
        verdicts[1..].iter().all(|v| *v == Verdict::NotMeasured),
        "{verdicts:?}"
    );
}

#[test]
fn publishing_a_partial_run_keeps_the_other_sections() {
    let dir = tempfile::tempdir().unwrap();
    full_report().save_json(dir.path()).unwrap();
    let rerun = Report {
        formation: Some(formation(1.0, 1.2)),
        ..Report::default()
    };
    let published = rerun.publish(dir.path(), &run("def5678")).unwrap();
    let loaded = Report::load_json(dir.path()).unwrap();
    assert_eq!(loaded, published);
    assert_eq!(loaded.formation, Some(formation(1.0, 1.2)));
    assert_eq!(loaded.fleet, full_report().fleet);
    assert_eq!(loaded.failover, full_report().failover);
    assert_eq!(loaded.measured_in[&Section::Formation].commit, "def5678");
    assert_eq!(loaded.measured_in[&Section::Webhook].commit, "abc1234");
    let page = std::fs::read_to_string(dir.path().join(MARKDOWN)).unwrap();
    assert!(
        page.contains("`def5678`") && page.contains("`abc1234`"),
        "both runs listed"
    );
    assert!(!page.contains("Not measured in this run"));
}

#[test]
fn figures_json_missing_is_empty_and_corrupt_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(Report::load_json(dir.path()).unwrap(), Report::default());
    std::fs::create_dir_all(dir.path().join(FIGURES_DIR)).unwrap();
    std::fs::write(dir.path().join(FIGURES_JSON), "{not json").unwrap();
    assert!(Report::load_json(dir.path()).is_err());
}

fn verdict(report: &Report, what_starts: &str) -> Verdict {
    let goals = report.goals();
    goals
        .iter()
        .find(|g| g.what.starts_with(what_starts))
        .unwrap_or_else(|| panic!("no goal {what_starts:?}"))
        .verdict
}

#[test]
fn ratio_goals_hold_at_their_limit_as_shown() {
    let with = |floor, operator| Report {
        formation: Some(formation(floor, operator)),
        ..Report::default()
    };
    assert_eq!(verdict(&with(2.0, 2.6), "Time-to-Active"), Verdict::Met);
    // 1.304 is shown as 1.30×: the reader sees the limit, so does the verdict.
    assert_eq!(verdict(&with(1.0, 1.304), "Time-to-Active"), Verdict::Met);
    assert_eq!(
        verdict(&with(1.0, 1.306), "Time-to-Active"),
        Verdict::NotMet
    );
    let mut slot_move = full_report().slot_move.unwrap();
    slot_move.atomic_seconds = 2.6; // 1.3 × 2.0
    slot_move.reshard_floor_seconds = None;
    let report = Report {
        slot_move: Some(slot_move),
        ..Report::default()
    };
    assert_eq!(verdict(&report, "Atomic slot move"), Verdict::Met);
    assert_eq!(verdict(&report, "Key-by-key"), Verdict::NotMeasured);
}

#[test]
fn fleet_goals_at_their_limits() {
    let with = |fleet: Fleet, build: &str| {
        let mut report = Report {
            fleet: Some(fleet),
            ..Report::default()
        };
        report.stamp(&Metadata {
            operator_build: build.into(),
            ..run("abc1234")
        });
        report
    };
    // One cluster in 10 s, 100 added, 10 at once: 100 s expected, 200 s allowed.
    assert_eq!(
        verdict(
            &with(fleet(10.0, 10, 200.0, 40.0), "release"),
            "200 clusters"
        ),
        Verdict::Met
    );
    assert_eq!(
        verdict(
            &with(fleet(10.0, 10, 201.0, 40.0), "release"),
            "200 clusters"
        ),
        Verdict::NotMet
    );
    assert_eq!(
        verdict(
            &with(fleet(10.0, 10, 200.0, 40.0), "release"),
            "Operator RSS"
        ),
        Verdict::Met
    );
    assert_eq!(
        verdict(
            &with(fleet(10.0, 10, 200.0, 40.06), "release"),
            "Operator RSS"
        ),
        Verdict::NotMet
    );
    assert_eq!(
        verdict(&with(fleet(10.0, 10, 200.0, 20.0), "debug"), "Operator RSS"),
        Verdict::NotMeasured
    );
    let mut short = fleet(10.0, 10, 200.0, 20.0);
    short.steps.pop();
    assert_eq!(
        verdict(&with(short, "release"), "Operator RSS"),
        Verdict::NotMeasured
    );
}

#[test]
fn webhook_goal_needs_every_kind_under_load_and_no_failures() {
    let with = |kinds: Vec<WebhookKind>| Report {
        webhook: Some(Webhook { kinds }),
        ..Report::default()
    };
    let goal = "Webhook p99";
    let at_limit = webhook_kind("ValkeyRole create", 5.0, 200.0, 200, 0);
    assert_eq!(verdict(&with(vec![at_limit.clone()]), goal), Verdict::Met);
    let over = webhook_kind("ValkeyCluster create", 5.01, 200.0, 200, 0);
    assert_eq!(
        verdict(&with(vec![at_limit.clone(), over]), goal),
        Verdict::NotMet
    );
    let light = webhook_kind("ValkeyCluster create", 1.0, 100.0, 200, 0);
    assert_eq!(
        verdict(&with(vec![at_limit.clone(), light]), goal),
        Verdict::NotMeasured
    );
    let few_clusters = webhook_kind("ValkeyCluster create", 1.0, 200.0, 10, 0);
    assert_eq!(
        verdict(&with(vec![few_clusters]), goal),
        Verdict::NotMeasured
    );
    let failing = webhook_kind("ValkeyCluster create", 1.0, 200.0, 200, 3);
    assert_eq!(verdict(&with(vec![failing]), goal), Verdict::NotMet);
}

#[test]
fn medians_and_percentiles() {
    assert_eq!(median(&[]), None);
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(percentile(&sorted, 0.5), Some(51.0));
    assert_eq!(percentile(&sorted, 1.0), Some(100.0));
    assert_eq!(percentile(&[], 0.5), None);
    let kind = WebhookKind::from_latencies("r", &[0.001, 0.002, 0.003], 1, 200.0, 200);
    assert_eq!((kind.requests, kind.failed), (4, 1));
    assert!((kind.max_ms - 3.0).abs() < 1e-9 && (kind.p50_ms - 2.0).abs() < 1e-9);
}

#[test]
fn real_client_goals_need_the_pause_within_limit_and_no_error() {
    let with = |pause, failed, writer| Report {
        real_clients: Some(real_clients(pause, failed, writer)),
        ..Report::default()
    };
    let python = "Real client (valkey-py";
    let writer = "The bench's own writer";
    assert_eq!(verdict(&with(1.0, 0, 0.5), python), Verdict::Met);
    assert_eq!(verdict(&with(1.0, 0, 0.5), writer), Verdict::Met);
    assert_eq!(verdict(&with(1.01, 0, 0.51), python), Verdict::NotMet);
    assert_eq!(verdict(&with(1.01, 0, 0.51), writer), Verdict::NotMet);
    // Within the pause, but a write failed: not met, saying so.
    let failed = with(0.2, 3, 0.1);
    assert_eq!(verdict(&failed, python), Verdict::NotMet);
    let goal = failed
        .goals()
        .into_iter()
        .find(|g| g.what.starts_with(python))
        .unwrap();
    assert_eq!(
        goal.note.as_deref(),
        Some("3 failed attempts, 0 acknowledged writes lost")
    );
    assert_eq!(verdict(&Report::default(), python), Verdict::NotMeasured);
    let page = failed.markdown();
    assert!(
        page.contains("- python (valkey-py): write 7 failed, retrying: EOF"),
        "{page}"
    );
}

#[test]
fn formation_says_how_much_of_the_time_is_before_every_member_runs() {
    let mut f = formation(2.0, 10.0);
    assert_eq!(f.split(), None);
    f.members_running_seconds = vec![Some(7.0)];
    assert_eq!(f.split(), Some((7.0, 3.0, Some(1.5))));
    let page = Report {
        formation: Some(f),
        ..Report::default()
    }
    .markdown();
    assert!(
        page.contains("7.00 s until every member's valkey container ran"),
        "{page}"
    );
    assert!(
        page.contains("then 3.00 s to Active (formation; 1.50×"),
        "{page}"
    );
}

#[test]
fn the_rollout_shown_is_the_worst_run_with_every_runs_ratio_and_the_longest_pause() {
    let run = |operator: [f64; 3], pause: f64| Rollout {
        shards: operator
            .iter()
            .map(|&o| ShardRollout {
                floor_seconds: 1.0,
                operator_seconds: o,
            })
            .collect(),
        writer_longest_pause_seconds: Some(pause),
        runs_worst_ratio: vec![],
    };
    let worst = Rollout::worst_of(vec![
        run([1.2, 1.1, 1.0], 0.9),
        run([1.1, 2.5, 1.0], 0.1),
        run([1.3, 1.2, 1.2], 0.2),
    ])
    .unwrap();
    assert_eq!(worst.worst_ratio(), Some(2.5));
    assert_eq!(worst.runs_worst_ratio, vec![1.2, 2.5, 1.3]);
    assert_eq!(worst.writer_longest_pause_seconds, Some(0.9));
    let text = worst.figures();
    assert!(
        text.contains("The worst of 3 runs is shown") && text.contains("1.20×, 2.50×, 1.30×"),
        "{text}"
    );
    assert!(Rollout::worst_of(vec![]).is_none());
}

#[test]
fn real_client_runs_combine_into_the_worst_pause_and_every_failure() {
    let combined = RealClients::worst_of(vec![
        real_clients(0.3, 0, 0.2),
        real_clients(0.9, 2, 0.1),
        real_clients(0.4, 0, 0.6),
    ])
    .unwrap();
    assert_eq!(combined.runs, 3);
    let py = combined.client("python").unwrap();
    assert_eq!(py.longest_pause_seconds, 0.9);
    assert_eq!((py.failed_attempts, py.acknowledged, py.lost), (2, 3000, 0));
    assert_eq!(py.by_operation[0].failed_attempts, 2);
    assert_eq!(py.by_operation[0].longest_pause_seconds, 0.9);
    assert!(py.first_failure.is_some());
    assert_eq!(
        combined.client(BENCH_WRITER).unwrap().longest_pause_seconds,
        0.6
    );
    assert!(combined.figures().contains("3 runs, combined"));
    assert!(RealClients::worst_of(vec![]).is_none());
}
