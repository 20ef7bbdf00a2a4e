//! The fuzz targets on stable, in the normal suite: each target's body
//! (`fuzz/src/lib.rs`, included here) over its seeds in `fuzz/seeds/` and
//! a few thousand deterministic mutations of them, so the targets always
//! compile and their properties hold without cargo-fuzz or a nightly
//! toolchain (`scripts/fuzz.sh` runs them under libFuzzer).

#[path = "../../../fuzz/src/lib.rs"]
mod targets;

use std::path::PathBuf;

/// Mutated inputs per target.
const ROUNDS: usize = 4000;

/// Tiny deterministic PRNG (xorshift), so the inputs are the same on every
/// run and need no extra crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes and tokens that the parsers under test branch on.
const TOKENS: &[&[u8]] = &[
    b"\r\n",
    b"\r\n\r\n",
    b"\n",
    b"\r",
    b"\0",
    b" ",
    b"\t",
    b":",
    b";",
    b"=",
    b",",
    b"\"",
    b"0",
    b"f",
    b"ffffffffffffffff",
    b"18446744073709551616",
    b"chunked",
    b"Content-Length: ",
    b"Transfer-Encoding: ",
    b"Host: ",
    b"HTTP/1.0",
    b"HTTP/1.1",
    b"0\r\n\r\n",
    b"/",
    b"..",
    b"%2e",
    b"%2f",
    b"%00",
    b"%c0%ae",
    b"\\",
    b"[",
    b"]",
    b"\xff",
    b"\xc3\xa9",
    b"PROXY ",
    b"\r\n\r\n\0\r\nQUIT\n",
];

/// One mutation of `seed`: bytes flipped, set, inserted, removed or
/// repeated, a token spliced in, or the input cut short.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = at.min(v.len() - 1);
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = at.min(v.len() - 1);
                v[i] = rng.next() as u8;
            }
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                v.splice(at..at, t.iter().copied());
            }
            3 if at < v.len() => {
                let end = (at + 1 + rng.below(8)).min(v.len());
                v.drain(at..end);
            }
            4 if at < v.len() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                let piece = v[at..end].to_vec();
                v.splice(at..at, piece);
            }
            5 => v.truncate(at),
            _ => v.insert(at, rng.next() as u8),
        }
    }
    v
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let out: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

/// Runs `check` on `data`, saying which input broke it.
fn run(target: &str, check: fn(&[u8]), data: &[u8]) {
    if std::panic::catch_unwind(|| check(data)).is_err() {
        panic!(
            "fuzz target {target} fails on {:?}",
            String::from_utf8_lossy(data)
        );
    }
}

#[test]
fn every_target_holds_on_its_seeds_and_their_mutations() {
    for &(name, check) in targets::TARGETS {
        let seeds = seeds(name);
        for s in &seeds {
            run(name, check, s);
        }
        run(name, check, b"");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
        for i in 0..ROUNDS {
            let seed = &seeds[i % seeds.len()];
            let input = if i % 16 == 15 {
                // Now and then plain noise, as libFuzzer starts with.
                (0..rng.below(64)).map(|_| rng.next() as u8).collect()
            } else {
                mutate(&mut rng, seed)
            };
            run(name, check, &input);
        }
    }
}

#[test]
fn every_fuzz_target_file_is_listed() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/fuzz_targets");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            p.file_stem().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    files.sort();
    let listed: Vec<&str> = targets::TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(files, listed);
}
