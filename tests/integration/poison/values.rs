//! A seeded RNG and hostile values, as SQL expressions.

use super::*;

// ---------------------------------------------------------------------------
// A seeded RNG: splitmix64 (Steele, Lea, Flood), enough to spread choices.

pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `p` percent.
    pub(super) fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    pub(super) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// Picks by weight: `(weight, item)`.
    pub(super) fn weighted<T: Copy>(&mut self, items: &[(u64, T)]) -> T {
        let total: u64 = items.iter().map(|(w, _)| w).sum();
        let mut point = self.below(total);
        for (w, item) in items {
            if point < *w {
                return *item;
            }
            point -= w;
        }
        items[items.len() - 1].1
    }

    pub(super) fn uuid(&mut self) -> Uuid {
        let bits = (u128::from(self.next()) << 64) | u128::from(self.next());
        uuid::Builder::from_random_bytes(bits.to_le_bytes()).into_uuid()
    }

    pub(super) fn i32(&mut self) -> i32 {
        self.next() as i32
    }
}

pub(super) fn seed() -> u64 {
    match std::env::var("CONVEYOR_POISON_SEED") {
        Ok(text) => {
            let text = text.trim();
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("CONVEYOR_POISON_SEED={text}: {e}"))
        }
        Err(_) => {
            let random = Uuid::new_v4().as_u128();
            (random >> 64) as u64 ^ random as u64
        }
    }
}

// ---------------------------------------------------------------------------
// Hostile values, as SQL expressions.

/// A SQL string literal (standard_conforming_strings: only `'` needs care).
pub(super) fn lit(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A jsonb expression from JSON text.
pub(super) fn jsonb(json: &str) -> String {
    format!("{}::jsonb", lit(json))
}

/// Pieces of strange text (raw characters; valid UTF-8, no NUL).
pub(super) const TEXT_PIECES: &[&str] = &[
    "poison",
    "x",
    " ",
    "\t",
    "\n",
    "'",
    "''",
    "\"",
    "\\",
    "--",
    "; DROP TABLE conveyor.jobs; --",
    "%s%n",
    "$1",
    "😀",
    "👩\u{200D}👩\u{200D}👧\u{200D}👦",
    "\u{202E}lortnoc\u{202C}",
    "שלום עולם",
    "مرحبا",
    "e\u{301}\u{302}\u{303}\u{304}\u{305}",
    "Z\u{324}\u{354}\u{367}\u{311}\u{313}a\u{308}\u{356}",
    "\u{FEFF}",
    "\u{200B}",
    "\u{FFFD}",
    "\u{10FFFF}",
    "𝕦𝕟𝕚𝕔𝕠𝕕𝕖",
    "Ω≈ç√∫",
];

/// Pieces of JSON string content: the raw pieces, plus escapes PostgreSQL
/// takes (a valid surrogate pair, `\u00e9`).
pub(super) const JSON_ESCAPES: &[&str] = &[
    "\\\"",
    "\\\\",
    "\\n\\t\\r",
    "\\u00e9",
    "\\ud83d\\ude00",
    "\\/",
];

/// Escapes a raw piece for a JSON string.
pub(super) fn json_escape(text: &str) -> String {
    let quoted = serde_json::to_string(text).expect("a string serializes");
    quoted[1..quoted.len() - 1].to_string()
}

/// Text of 0..n pieces, sometimes very long (up to 100 kB).
pub(super) fn text(rng: &mut Rng) -> String {
    if rng.percent(3) {
        let piece = rng.pick(TEXT_PIECES);
        let bytes = 1 + rng.below(100_000) as usize;
        return piece.repeat(bytes / piece.len().max(1) + 1);
    }
    let n = rng.below(6);
    (0..n).map(|_| rng.pick(TEXT_PIECES)).collect()
}

/// A JSON string literal (quoted).
pub(super) fn json_string(rng: &mut Rng) -> String {
    if rng.percent(3) {
        let piece = json_escape(rng.pick(TEXT_PIECES));
        let bytes = 1 + rng.below(100_000) as usize;
        return format!("\"{}\"", piece.repeat(bytes / piece.len().max(1) + 1));
    }
    let n = rng.below(5);
    let body: String = (0..n)
        .map(|_| {
            if rng.percent(25) {
                rng.pick(JSON_ESCAPES).to_string()
            } else {
                json_escape(rng.pick(TEXT_PIECES))
            }
        })
        .collect();
    format!("\"{body}\"")
}

/// Numbers: ones no f64 holds (serde_json refuses `1e400`), ones that lose
/// precision, and ordinary ones.
pub(super) fn json_number(rng: &mut Rng) -> String {
    const NUMBERS: &[&str] = &[
        "0",
        "-0",
        "1e400",
        "-1e400",
        "123456789012345678901234567890",
        "1e308",
        "1.7976931348623157e308",
        "-1e-400",
        "5e-324",
        "0.1",
        "9223372036854775807",
        "18446744073709551616",
        "-9223372036854775809",
        "2147483648",
    ];
    if rng.percent(30) {
        rng.i32().to_string()
    } else {
        rng.pick(NUMBERS).to_string()
    }
}

/// A JSON value, at most `depth` more levels of ordinary nesting, plus now
/// and then a very deep one.
pub(super) fn json_value(rng: &mut Rng, depth: u32) -> String {
    // (Deep nesting, kind 6, in one value out of about twelve.)
    let kind = if depth == 0 {
        rng.below(4)
    } else if rng.percent(8) {
        6
    } else {
        rng.below(6)
    };
    match kind {
        0 => json_number(rng),
        1 => json_string(rng),
        2 => rng.pick(&["true", "false", "null"]).to_string(),
        3 => rng.pick(&["{}", "[]", "\"\""]).to_string(),
        4 => {
            let n = rng.below(5);
            let items: Vec<String> = (0..n).map(|_| json_value(rng, depth - 1)).collect();
            format!("[{}]", items.join(","))
        }
        5 => {
            // Keys: strange, empty, repeated (jsonb keeps the last).
            let n = rng.below(5);
            let items: Vec<String> = (0..n)
                .map(|_| {
                    let key = if rng.percent(30) {
                        "\"k\"".to_string()
                    } else {
                        json_string(rng)
                    };
                    format!("{key}:{}", json_value(rng, depth - 1))
                })
                .collect();
            format!("{{{}}}", items.join(","))
        }
        _ => {
            let levels = rng.pick(&[1, 2, 10, 100, 127, 128, 129, 200, 399, 400]);
            let levels = if rng.percent(30) {
                rng.below(401) as u32
            } else {
                levels
            };
            let leaf = json_value(rng, 0);
            deep(rng, levels, &leaf)
        }
    }
}

/// `leaf` inside `levels` arrays and objects, mixed.
pub(super) fn deep(rng: &mut Rng, levels: u32, leaf: &str) -> String {
    let mut open = String::new();
    let mut close = Vec::new();
    for _ in 0..levels {
        if rng.percent(50) {
            open.push('[');
            close.push("]");
        } else {
            open.push_str("{\"d\":");
            close.push("}");
        }
    }
    close.reverse();
    format!("{open}{leaf}{}", close.concat())
}

/// A JSON object whose values are hostile (for `headers`, which must be one).
pub(super) fn json_object(rng: &mut Rng) -> String {
    let mut items = Vec::new();
    if rng.percent(40) {
        let traceparent = rng.pick(&[
            "\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\"",
            "\"00-00000000000000000000000000000000-0000000000000000-01\"",
            "\"ff-zz-yy-xx\"",
            "\"00-😀😀😀-😀-01\"",
            "\"\"",
            "42",
            "[\"00\"]",
        ]);
        items.push(format!("\"traceparent\":{traceparent}"));
        items.push(format!("\"tracestate\":{}", json_string(rng)));
    }
    for _ in 0..rng.below(3) {
        items.push(format!("{}:{}", json_string(rng), json_value(rng, 3)));
    }
    if rng.percent(10) {
        let levels = rng.pick(&[100, 127, 128, 129, 300, 400]);
        items.push(format!("\"deep\":{}", deep(rng, levels, "1")));
    }
    format!("{{{}}}", items.join(","))
}

/// A value for `errors` (an array): junk entries, entries of the wrong
/// shape, and well-formed ones.
pub(super) fn json_errors(rng: &mut Rng) -> String {
    let n = rng.below(5);
    let items: Vec<String> = (0..n)
        .map(|_| match rng.below(10) {
            0 => "1".to_string(),
            1 => json_string(rng),
            2 => "null".to_string(),
            3 => "{\"attempt\":\"one\"}".to_string(),
            4 => format!("{{\"attempt\":{}}}", json_number(rng)),
            5 => "{\"at\":\"not a date\"}".to_string(),
            6 => "{\"at\":\"294276-01-01T00:00:00Z\",\"attempt\":99999999999}".to_string(),
            7 => json_value(rng, 3),
            _ => format!(
                "{{\"attempt\":1,\"at\":\"2024-01-01T00:00:00Z\",\"error\":{},\"worker_id\":null}}",
                json_string(rng)
            ),
        })
        .collect();
    format!("[{}]", items.join(","))
}

/// A follow-up spec: what `on_success` / `on_error` hold. Some are valid
/// (their jobs are spawned, and must end in a defined state too); most are
/// nonsense that `conveyor_internal.after_finish` must turn into a failure.
pub(super) fn spec(rng: &mut Rng) -> String {
    let id = rng.uuid();
    let wf = rng.uuid();
    let member = rng.uuid();
    match rng.below(24) {
        0 => r#"{"kind":"job","task":""}"#.to_string(),
        1 => r#"{"kind":"workflow"}"#.to_string(),
        2 => "42".to_string(),
        3..=5 => format!(
            r#"{{"kind":"job","id":"{id}","task":"poison","args":{}}}"#,
            json_value(rng, 2)
        ),
        6 => format!(
            r#"{{"kind":"job","id":"{id}","task":"poison","queue":"other","run_at":"infinity"}}"#
        ),
        7 => format!(r#"{{"kind":"job","id":"{id}","task":"poison","delay_secs":1e300}}"#),
        8 => format!(r#"{{"kind":"job","id":"{id}","task":"poison","delay_secs":-1e9}}"#),
        9 => format!(r#"{{"kind":"job","id":"{id}","task":"poison","priority":"high"}}"#),
        10 => format!(r#"{{"kind":"job","id":"{id}","task":"poison","max_retries":-1}}"#),
        11 => format!(r#"{{"kind":"job","id":"{id}","task":"poison","timeout_secs":0}}"#),
        12 => format!(
            r#"{{"kind":"job","id":"{id}","task":"poison","retry_backoff_base_secs":1e308}}"#
        ),
        13 => format!(r#"{{"kind":"job","id":"{id}","task":"poison","pass_result":true}}"#),
        14 => format!(r#"{{"kind":"job","id":"{id}","task":"unregistered"}}"#),
        15 => format!(r#"{{"kind":"job","id":"{id}","task":"poison","headers":[1]}}"#),
        16 => format!(
            r#"{{"kind":"job","id":"{id}","task":"poison","queue":"{}"}}"#,
            "q".repeat(129)
        ),
        17 => format!(
            r#"{{"kind":"workflow","id":"{wf}","workflow":"group","total":1,"start":[{{"kind":"job","id":"{member}","task":"poison","workflow_id":"{wf}","workflow_index":0}}]}}"#
        ),
        18 => {
            format!(r#"{{"kind":"workflow","id":"{wf}","workflow":"chain","total":-1,"start":[]}}"#)
        }
        19 => format!(
            // Its own parent: the foreign key holds, and nothing may recurse forever.
            r#"{{"kind":"workflow","id":"{wf}","workflow":"chord","parent_id":"{wf}","total":1,"start":[{{"kind":"job","id":"{member}","task":"poison","workflow_id":"{wf}","workflow_index":0}}],"on_complete":{{"kind":"job","id":"{id}","task":"poison","pass_result":true}}}}"#
        ),
        20 => {
            // Workflows nested `levels` deep (PL/pgSQL recursion).
            let levels = rng.pick(&[2, 10, 100, 300]);
            let mut spec = format!(
                r#"{{"kind":"job","id":"{id}","task":"poison","workflow_id":"WF","workflow_index":0}}"#
            );
            for _ in 0..levels {
                let w = rng.uuid();
                spec = format!(
                    r#"{{"kind":"workflow","id":"{w}","workflow":"chain","total":1,"start":[{}]}}"#,
                    spec.replace("\"WF\"", &format!("\"{w}\""))
                );
            }
            spec.replace("\"WF\"", "null")
        }
        21 => format!(r#"{{"kind":"job","id":"{id}","task":"normal","args":{{"from":"poison"}}}}"#),
        _ => json_value(rng, 2),
    }
}

/// `on_success` / `on_error`: an array of specs, or something else entirely.
pub(super) fn follow_ups(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => json_value(rng, 3),
        1 => rng
            .pick(&["42", "\"oops\"", "{}", "null", "[]", "[[]]", "[null]"])
            .to_string(),
        _ => {
            let n = 1 + rng.below(3);
            let specs: Vec<String> = (0..n).map(|_| spec(rng)).collect();
            format!("[{}]", specs.join(","))
        }
    }
}

/// A time the columns hold (year 1 to 9999), as a SQL expression.
pub(super) fn time_ok(rng: &mut Rng) -> String {
    match rng.below(9) {
        0 => "now()".to_string(),
        1 => format!(
            "now() - interval '{} seconds'",
            1 + rng.below(1_000_000_000)
        ),
        2 => format!("now() + interval '{} milliseconds'", rng.below(3_000)),
        3 => format!("now() + interval '{} days'", 1 + rng.below(100_000)),
        4 => "'9999-12-31 23:59:59.999999+00'".to_string(),
        5 => "'0001-01-01 00:00:00+00'".to_string(),
        6 => "'1970-01-01 00:00:00+00'".to_string(),
        7 => "'2000-02-29 23:59:60+14'".to_string(),
        _ => format!("now() - interval '{} milliseconds'", rng.below(5_000)),
    }
}

/// A time the columns refuse: out of their range, or not a time.
pub(super) fn time_bad(rng: &mut Rng) -> String {
    rng.pick(&[
        "'infinity'",
        "'-infinity'",
        "'4713-01-01 BC'",
        "'294276-01-01'",
        "'10000-01-01 00:00:00+00'",
        "'0001-01-01 00:00:00+01'",
        "'0001-01-01 BC'",
        "'not a time'",
        "'2024-02-30'",
        "'99999999-01-01'",
    ])
    .to_string()
}

/// A time the jobs table takes only where no reader decodes it
/// (`cancel_requested_at`, `unique_until`): infinite, or past year 9999.
pub(super) fn time_unread(rng: &mut Rng) -> String {
    rng.pick(&[
        "'infinity'",
        "'-infinity'",
        "'294276-01-01'",
        "'4713-01-01 BC'",
    ])
    .to_string()
}

/// An interval PostgreSQL holds, from none to the largest.
pub(super) fn interval_ok(rng: &mut Rng) -> String {
    if rng.percent(20) {
        return format!("interval '{} milliseconds'", rng.below(5_000));
    }
    format!(
        "interval {}",
        lit(rng.pick(&[
            "0",
            "1 microsecond",
            "1 millisecond",
            "10 milliseconds",
            "1 second",
            "1 hour",
            "7 days",
            "1 mon",
            "178000000 years",
        ]))
    )
}
