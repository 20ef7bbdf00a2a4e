//! Helpers shared by the unit tests: the seeded mutation that stands in for
//! the cargo-fuzz targets in `cargo test` (same seeds every run, so a
//! failure reproduces).

/// One input: a seed with up to three bytes changed, inserted or removed,
/// or cut short, drawing new bytes from `alphabet`.
pub fn mutated(rng: &mut fastrand::Rng, seeds: &[&[u8]], alphabet: &[u8]) -> Vec<u8> {
    let mut input = seeds[rng.usize(..seeds.len())].to_vec();
    for _ in 0..rng.usize(0..4) {
        let at = rng.usize(..=input.len());
        match rng.u8(0..4) {
            0 if at < input.len() => input[at] = alphabet[rng.usize(..alphabet.len())],
            1 => input.insert(at, alphabet[rng.usize(..alphabet.len())]),
            2 if at < input.len() => {
                input.remove(at);
            }
            _ => input.truncate(at),
        }
    }
    input
}
