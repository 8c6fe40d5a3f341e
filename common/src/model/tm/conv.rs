//! The convolutional Tsetlin Machine (Granmo et al. 2019), in the multi-class form (a clause bank
//! per class) or the coalesced form (one bank, a weight per class and clause): clauses look at
//! W×W patches of an image, a patch's literals being its pixels plus its position in
//! thermometer code; a clause fires on an image when it fires on any patch, and learns from one
//! patch drawn at random among those it fires on.

use rand::RngExt;

use super::bank::{ClauseBank, LiteralRows};
use super::coalesced::{CoalescedTm, LearnBuffers};
use super::infer::{accuracy, predictions};
use super::multiclass::{ClassFeedback, ClassMut, MultiClassTm};
use super::patch_literals::PatchLiterals;
use super::{FeedbackMasks, NegativeSampling, TmHyper};
use crate::data::booleanize::BitRows;
use crate::data::booleanize::words_for;
use crate::rng::FlintRng;

/// Image shape and patch size. An image's bit `(y·width + x)·channels + z` is pixel (x, y),
/// channel z.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchSpec {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    pub patch: usize,
}

impl PatchSpec {
    pub fn check(&self) -> Result<(), String> {
        if self.channels == 0
            || self.patch == 0
            || self.patch > self.width
            || self.patch > self.height
        {
            return Err(format!(
                "a {}×{} patch does not fit a {}×{}×{} image",
                self.patch, self.patch, self.width, self.height, self.channels
            ));
        }
        Ok(())
    }

    pub fn image_bits(&self) -> usize {
        self.width * self.height * self.channels
    }

    fn across(&self) -> usize {
        self.width - self.patch + 1
    }

    /// Patch positions per image.
    pub fn positions(&self) -> usize {
        self.across() * (self.height - self.patch + 1)
    }

    /// Features of one patch: W·W·channels pixels, then y and x in thermometer code.
    pub fn patch_features(&self) -> usize {
        self.patch * self.patch * self.channels
            + (self.height - self.patch)
            + (self.width - self.patch)
    }

    /// Thermometer bits of every position: y (bit k set when py > k), then x.
    fn position_words(&self) -> Vec<u64> {
        let (pfw, pixels) = (
            words_for(self.patch_features()),
            self.patch * self.patch * self.channels,
        );
        let mut out = vec![0u64; self.positions() * pfw];
        for pos in 0..self.positions() {
            let (px, py) = (pos % self.across(), pos / self.across());
            let row = &mut out[pos * pfw..(pos + 1) * pfw];
            for k in 0..py {
                set(row, pixels + k);
            }
            for k in 0..px {
                set(row, pixels + (self.height - self.patch) + k);
            }
        }
        out
    }

    /// The position features of every patch, literal-major (the same for every image).
    fn position_literals(&self, position_words: &[u64]) -> PatchLiterals {
        let pfw = words_for(self.patch_features());
        let mut rows = BitRows::new(self.patch_features(), 2);
        for row in position_words.chunks_exact(pfw) {
            rows.push_words(row, 0);
        }
        let mut out = PatchLiterals::new(self.patch_features(), self.positions());
        out.fill_from_rows(&rows);
        out
    }

    /// Every patch of `image`, literal-major, into `out`, read straight from the image's rows
    /// when they fit a word (one channel, at most 64 pixels wide). False, `out` untouched, for
    /// other shapes: their literals come from the patch rows ([`PatchLiterals::fill_from_rows`]).
    fn literals_from_image(
        &self,
        image: &[u64],
        positions: &PatchLiterals,
        out: &mut PatchLiterals,
    ) -> bool {
        if self.channels != 1 || self.width > 64 {
            return false;
        }
        let (w, across) = (self.patch, self.across());
        let keep = if across == 64 {
            u64::MAX
        } else {
            (1u64 << across) - 1
        };
        let rows: Vec<u64> = (0..self.height)
            .map(|y| bits_at(image, y * self.width, self.width))
            .collect();
        // Pixel (dx, dy) of the patch at (px, py) is image pixel (px + dx, py + dy): over the
        // positions of one patch row, image row py + dy shifted by dx.
        for dy in 0..w {
            for dx in 0..w {
                let row = out.feature_mut(dy * w + dx);
                row.fill(0);
                for (py, image_row) in rows[dy..].iter().take(self.height - w + 1).enumerate() {
                    put_bits(row, py * across, (image_row >> dx) & keep, across);
                }
            }
        }
        for f in w * w..self.patch_features() {
            out.feature_mut(f).copy_from_slice(positions.row(f, false));
        }
        out.negate();
        true
    }

    /// Every patch of `image`, literal-major, into `out`: from the image's rows where they fit a
    /// word, else from `rows`, its patch rows ([`Self::patches`]).
    fn literals(
        &self,
        image: &[u64],
        positions: &PatchLiterals,
        rows: &BitRows,
        out: &mut PatchLiterals,
    ) {
        if !self.literals_from_image(image, positions, out) {
            out.fill_from_rows(rows);
        }
    }

    /// The feature rows of every patch of `image`, replacing `out`'s rows.
    fn patches(&self, image: &[u64], position_words: &[u64], out: &mut BitRows) {
        out.clear();
        let (w, pfw) = (self.patch, words_for(self.patch_features()));
        let mut row = vec![0u64; pfw];
        // One channel and narrow images: image rows as bit masks, a patch row in one shift.
        let rows: Option<Vec<u64>> = (self.channels == 1 && self.width <= 64).then(|| {
            (0..self.height)
                .map(|y| bits_at(image, y * self.width, self.width))
                .collect()
        });
        for pos in 0..self.positions() {
            let (px, py) = (pos % self.across(), pos / self.across());
            row.copy_from_slice(&position_words[pos * pfw..(pos + 1) * pfw]);
            match &rows {
                Some(rows) => {
                    let keep = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
                    for dy in 0..w {
                        put_bits(&mut row, dy * w, (rows[py + dy] >> px) & keep, w);
                    }
                }
                None => {
                    for dy in 0..w {
                        for dx in 0..w {
                            for z in 0..self.channels {
                                let src = ((py + dy) * self.width + px + dx) * self.channels + z;
                                if image[src / 64] >> (src % 64) & 1 == 1 {
                                    set(&mut row, (dy * w + dx) * self.channels + z);
                                }
                            }
                        }
                    }
                }
            }
            out.push_words(&row, 0);
        }
    }
}

fn set(words: &mut [u64], bit: usize) {
    words[bit / 64] |= 1 << (bit % 64);
}

/// `len` (≤ 64) bits of `words` starting at bit `start`.
fn bits_at(words: &[u64], start: usize, len: usize) -> u64 {
    let (w, b) = (start / 64, start % 64);
    let mut v = words[w] >> b;
    if b + len > 64 && w + 1 < words.len() {
        v |= words[w + 1] << (64 - b);
    }
    if len == 64 {
        v
    } else {
        v & ((1u64 << len) - 1)
    }
}

/// Writes the low `len` bits of `value` at bit `start`.
fn put_bits(words: &mut [u64], start: usize, value: u64, len: usize) {
    let (w, b) = (start / 64, start % 64);
    words[w] |= value << b;
    if b + len > 64 {
        words[w + 1] |= value >> (64 - b);
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Form {
    MultiClass(MultiClassTm),
    Coalesced(CoalescedTm),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConvTm {
    spec: PatchSpec,
    position_words: Vec<u64>,
    /// The position features of every patch, literal-major.
    positions: PatchLiterals,
    form: Form,
}

/// Reused buffers of the training loop.
#[derive(Debug)]
pub struct ConvScratch {
    patches: BitRows,
    literals: PatchLiterals,
    lit_rows: Vec<u64>,
    lits: Vec<u64>,
    fired: Vec<bool>,
    row_of: Vec<u32>,
    /// Per block of 64 patches: where the clause being evaluated fires.
    out: Vec<u64>,
    selected: Vec<u32>,
    coalesced: LearnBuffers,
}

impl ConvScratch {
    pub fn new(spec: &PatchSpec) -> ConvScratch {
        ConvScratch {
            patches: BitRows::new(spec.patch_features(), 2),
            literals: PatchLiterals::new(spec.patch_features(), spec.positions()),
            lit_rows: Vec::new(),
            lits: Vec::new(),
            fired: Vec::new(),
            row_of: Vec::new(),
            out: Vec::new(),
            selected: Vec::new(),
            coalesced: LearnBuffers::default(),
        }
    }
}

impl ConvTm {
    /// The multi-class form: a clause bank per class.
    pub fn new(hyper: TmHyper, spec: PatchSpec, classes: usize) -> Result<ConvTm, String> {
        spec.check()?;
        let tm = MultiClassTm::new(hyper, spec.patch_features(), classes);
        ConvTm::shaped(spec, Form::MultiClass(tm))
    }

    fn shaped(spec: PatchSpec, form: Form) -> Result<ConvTm, String> {
        spec.check()?;
        let position_words = spec.position_words();
        Ok(ConvTm {
            positions: spec.position_literals(&position_words),
            position_words,
            form,
            spec,
        })
    }

    /// The multi-class form around a machine over this spec's patch features (FedTMOS's server
    /// models, rebuilt from weights and include bits).
    pub fn from_multiclass(spec: PatchSpec, tm: MultiClassTm) -> Result<ConvTm, String> {
        spec.check()?;
        if tm.features() != spec.patch_features() {
            return Err(format!(
                "a machine of {} features for patches of {}",
                tm.features(),
                spec.patch_features()
            ));
        }
        ConvTm::shaped(spec, Form::MultiClass(tm))
    }

    /// The coalesced form: one clause bank shared by the classes; `rng` draws the ±1 weights.
    pub fn new_coalesced(
        hyper: TmHyper,
        spec: PatchSpec,
        classes: usize,
        rng: &mut FlintRng,
    ) -> Result<ConvTm, String> {
        spec.check()?;
        let tm = CoalescedTm::new(hyper, spec.patch_features(), classes, rng);
        ConvTm::shaped(spec, Form::Coalesced(tm))
    }

    pub fn spec(&self) -> &PatchSpec {
        &self.spec
    }

    /// The multi-class machine over patch literals (what the federation exchanges), if that form.
    pub fn multiclass(&self) -> Option<&MultiClassTm> {
        match &self.form {
            Form::MultiClass(tm) => Some(tm),
            Form::Coalesced(_) => None,
        }
    }

    /// The coalesced machine over patch literals, if that form.
    pub fn coalesced(&self) -> Option<&CoalescedTm> {
        match &self.form {
            Form::Coalesced(tm) => Some(tm),
            Form::MultiClass(_) => None,
        }
    }

    pub fn classes(&self) -> usize {
        match &self.form {
            Form::MultiClass(tm) => tm.classes(),
            Form::Coalesced(tm) => tm.classes(),
        }
    }

    pub fn hyper(&self) -> &TmHyper {
        match &self.form {
            Form::MultiClass(tm) => tm.hyper(),
            Form::Coalesced(tm) => tm.hyper(),
        }
    }

    pub fn update(
        &mut self,
        image: &[u64],
        y: u32,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        s: &mut ConvScratch,
    ) {
        self.spec
            .patches(image, &self.position_words, &mut s.patches);
        let mut literals = std::mem::take(&mut s.literals);
        self.spec
            .literals(image, &self.positions, &s.patches, &mut literals);
        let any_bank = match &self.form {
            Form::MultiClass(tm) => tm.bank(0),
            Form::Coalesced(tm) => tm.bank(),
        };
        s.lit_rows.clear();
        for p in 0..s.patches.len() {
            any_bank.literals_of(s.patches.row(p), &mut s.lits);
            s.lit_rows.extend_from_slice(&s.lits);
        }
        match &mut self.form {
            Form::MultiClass(tm) => {
                tm.count(y);
                let y = y as usize;
                learn_class(tm, y, true, &literals, masks, rng, s);
                let classes = tm.classes();
                if tm.hyper().negative_sampling == NegativeSampling::All {
                    for c in (0..classes).filter(|&c| c != y) {
                        learn_class(tm, c, false, &literals, masks, rng, s);
                    }
                } else {
                    // Focused sampling is the multi-class machine's; here the negative is uniform.
                    let r = rng.random_range(0..classes - 1);
                    let negative = if r >= y { r + 1 } else { r };
                    learn_class(tm, negative, false, &literals, masks, rng, s);
                }
            }
            Form::Coalesced(tm) => {
                patch_outputs(tm.bank(), &literals, rng, s);
                let (fired, row_of) = (std::mem::take(&mut s.fired), std::mem::take(&mut s.row_of));
                let rows = LiteralRows {
                    rows: &s.lit_rows,
                    row_of: Some(&row_of),
                };
                tm.learn(y, &fired, rows, masks, rng, &mut s.coalesced, None);
                (s.fired, s.row_of) = (fired, row_of);
            }
        }
        s.literals = literals;
    }

    /// One pass over `data` in an order shuffled by `rng`.
    pub fn fit_epoch(&mut self, data: &BitRows, masks: &mut FeedbackMasks, rng: &mut FlintRng) {
        use rand::seq::SliceRandom;
        let mut order: Vec<usize> = (0..data.len()).collect();
        order.shuffle(rng);
        self.fit_in_order(data, &order, masks, rng);
    }

    /// One pass over `data` sorted by class (each class's rows in their order in `data`), the
    /// published FedTMOS code's unshuffled epochs (`fedtmos.epoch_order`). With 2 threads the
    /// sorted rows are cut into halves (the first the longer), as OpenMP's static schedule gives
    /// them to two threads, and taken a row of each in turn; more threads cut ⌈n / threads⌉
    /// rows a part.
    pub fn fit_epoch_by_class(
        &mut self,
        data: &BitRows,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        threads: usize,
    ) {
        let mut sorted: Vec<usize> = (0..data.len()).collect();
        sorted.sort_by_key(|&i| data.labels[i]);
        let part = data.len().div_ceil(threads.max(1)).max(1);
        let parts: Vec<&[usize]> = sorted.chunks(part).collect();
        let longest = parts.first().map_or(0, |p| p.len());
        let order: Vec<usize> = (0..longest)
            .flat_map(|k| parts.iter().filter_map(move |p| p.get(k).copied()))
            .collect();
        self.fit_in_order(data, &order, masks, rng);
    }

    fn fit_in_order(
        &mut self,
        data: &BitRows,
        order: &[usize],
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
    ) {
        let mut scratch = ConvScratch::new(&self.spec);
        for &i in order {
            self.update(data.row(i), data.labels[i], masks, rng, &mut scratch);
        }
    }

    /// One-vs-all (`negative_sampling = "all"`) on the multi-class form with every class on its
    /// own random stream and mask pool (drawn from `rng`), the classes split whole over
    /// `threads`: each class learns from every example independently of the others, so the
    /// model is the same for any thread count (and differs from [`Self::fit_epoch`]'s, which
    /// draws everything from one stream). Other modes and the coalesced form train as
    /// [`Self::fit_epoch`] does.
    pub fn fit_epoch_threaded(
        &mut self,
        data: &BitRows,
        masks: &mut FeedbackMasks,
        rng: &mut FlintRng,
        threads: usize,
    ) {
        use rand::SeedableRng;
        use rand::seq::SliceRandom;
        let (spec, position_words, positions) = (self.spec, &self.position_words, &self.positions);
        let Form::MultiClass(tm) = &mut self.form else {
            return self.fit_epoch(data, masks, rng);
        };
        if tm.hyper().negative_sampling != NegativeSampling::All {
            return self.fit_epoch(data, masks, rng);
        }
        let mut order: Vec<usize> = (0..data.len()).collect();
        order.shuffle(rng);
        for &i in &order {
            tm.count(data.labels[i]);
        }
        let seeds: Vec<u64> = (0..tm.classes()).map(|_| rng.random()).collect();
        let (hyper, classes) = tm.classes_mut();
        let mut work: Vec<(usize, ClassMut<'_>, u64)> = classes
            .into_iter()
            .zip(seeds)
            .enumerate()
            .map(|(c, (class, seed))| (c, class, seed))
            .collect();
        // Each class gets its stream and masks once; examples go in blocks whose patches and
        // literals are computed once, then every thread walks the block for its classes.
        let mut streams: Vec<(FlintRng, FeedbackMasks, ConvScratch)> = work
            .iter()
            .map(|(_, _, seed)| {
                let mut rng = FlintRng::seed_from_u64(*seed);
                let masks = FeedbackMasks::new(hyper.s, &mut rng);
                (rng, masks, ConvScratch::new(&spec))
            })
            .collect();
        let mut patches = BitRows::new(spec.patch_features(), 2);
        let mut lits = Vec::new();
        for block in order.chunks(256) {
            let prepared: Vec<(PatchLiterals, Vec<u64>, u32)> = block
                .iter()
                .map(|&i| {
                    spec.patches(data.row(i), position_words, &mut patches);
                    let mut rows = Vec::new();
                    for p in 0..patches.len() {
                        work[0].1.bank.literals_of(patches.row(p), &mut lits);
                        rows.extend_from_slice(&lits);
                    }
                    let mut literals = positions.clone();
                    spec.literals(data.row(i), positions, &patches, &mut literals);
                    (literals, rows, data.labels[i])
                })
                .collect();
            let mut jobs: Vec<_> = work.iter_mut().zip(streams.iter_mut()).collect();
            crate::parallel::each_mut(&mut jobs, threads, |_, ((c, class, _), (rng, masks, s))| {
                for (literals, rows, y) in &prepared {
                    let target = *y as usize == *c;
                    let image = ImagePatches { literals, rows };
                    learn_one(class, &hyper, target, image, masks, rng, s);
                }
            });
        }
    }

    /// Class sums of every image (row-major, `classes` per image).
    pub fn class_sums_batch(&self, data: &BitRows) -> Vec<i32> {
        let mut patches = BitRows::new(self.spec.patch_features(), 2);
        let mut literals = self.positions.clone();
        let mut out = vec![0u64; literals.blocks()];
        let classes = self.classes();
        let mut sums = Vec::with_capacity(data.len() * classes);
        let compiled = match &self.form {
            Form::MultiClass(tm) => tm.compile(),
            Form::Coalesced(tm) => vec![tm.compile()],
        };
        for i in 0..data.len() {
            self.image_literals(data.row(i), &mut patches, &mut literals);
            match &self.form {
                Form::MultiClass(_) => sums.extend(
                    compiled
                        .iter()
                        .map(|c| c.sum_on_patches(&literals, &mut out)),
                ),
                Form::Coalesced(tm) => {
                    let start = sums.len();
                    sums.resize(start + classes, 0);
                    let row = &mut sums[start..];
                    for (k, &id) in compiled[0].ids().iter().enumerate() {
                        if compiled[0].fires_on_a_patch(k, &literals, &mut out) {
                            for (c, v) in row.iter_mut().enumerate() {
                                *v += tm.class_weights(c)[id as usize];
                            }
                        }
                    }
                }
            }
        }
        sums
    }

    /// Every patch of `image`, literal-major, into `out` (`rows`: scratch for the patch rows).
    fn image_literals(&self, image: &[u64], rows: &mut BitRows, out: &mut PatchLiterals) {
        if !self.spec.literals_from_image(image, &self.positions, out) {
            self.spec.patches(image, &self.position_words, rows);
            out.fill_from_rows(rows);
        }
    }

    pub fn predict_batch(&self, data: &BitRows) -> Vec<u32> {
        predictions(&self.class_sums_batch(data), self.classes())
    }

    pub fn accuracy(&self, data: &BitRows) -> f64 {
        accuracy(&self.predict_batch(data), &data.labels)
    }
}

/// Which patches each clause of `bank` fires on (training: empty clauses fire everywhere):
/// fills `s.fired`, and `s.row_of` with one firing patch per clause drawn uniformly by `rng`.
fn patch_outputs(
    bank: &ClauseBank,
    patches: &PatchLiterals,
    rng: &mut FlintRng,
    s: &mut ConvScratch,
) {
    s.fired.clear();
    s.row_of.clear();
    s.out.resize(patches.blocks(), 0);
    for j in 0..bank.clauses() {
        let alive = patches.fires(bank.include(j), &mut s.out);
        s.fired.push(alive);
        s.row_of
            .push(if alive { pick_patch(&s.out, rng) } else { 0 });
    }
}

/// One of the patches set in `fired` (a word per block of 64), uniformly.
fn pick_patch(fired: &[u64], rng: &mut FlintRng) -> u32 {
    let total: u32 = fired.iter().map(|o| o.count_ones()).sum();
    let mut pick = rng.random_range(0..total);
    for (b, &o) in fired.iter().enumerate() {
        let n = o.count_ones();
        if pick < n {
            let mut bits = o;
            for _ in 0..pick {
                bits &= bits - 1;
            }
            return (b * 64) as u32 + bits.trailing_zeros();
        }
        pick -= n;
    }
    unreachable!("pick is below the total")
}

/// Feedback to one class of the multi-class form, each clause learning from its firing patch.
fn learn_class(
    tm: &mut MultiClassTm,
    class: usize,
    target: bool,
    patches: &PatchLiterals,
    masks: &mut FeedbackMasks,
    rng: &mut FlintRng,
    s: &mut ConvScratch,
) {
    let (hyper, mut class) = tm.class_mut(class);
    let lit_rows = std::mem::take(&mut s.lit_rows);
    let image = ImagePatches {
        literals: patches,
        rows: &lit_rows,
    };
    learn_one(&mut class, &hyper, target, image, masks, rng, s);
    s.lit_rows = lit_rows;
}

/// One image's patches, twice: literal-major, to find where each clause fires, and as literal
/// rows (`2·fw` words a patch), for each clause to learn from the patch it fired on.
#[derive(Clone, Copy)]
struct ImagePatches<'a> {
    literals: &'a PatchLiterals,
    rows: &'a [u64],
}

/// Feedback to one class borrowed alone, given the image's patches.
fn learn_one(
    class: &mut ClassMut<'_>,
    hyper: &TmHyper,
    target: bool,
    image: ImagePatches<'_>,
    masks: &mut FeedbackMasks,
    rng: &mut FlintRng,
    s: &mut ConvScratch,
) {
    patch_outputs(class.bank, image.literals, rng, s);
    let t = hyper.t;
    let v: i32 = s
        .fired
        .iter()
        .enumerate()
        .filter(|(_, f)| **f)
        .map(|(j, _)| MultiClassTm::polarity(j) * class.weights[j] as i32)
        .sum();
    let (fired, row_of) = (std::mem::take(&mut s.fired), std::mem::take(&mut s.row_of));
    let at = ClassFeedback {
        target,
        v: v.clamp(-t, t),
        fired: &fired,
        rows: LiteralRows {
            rows: image.rows,
            row_of: Some(&row_of),
        },
    };
    class.apply_feedback(hyper, at, masks, rng, &mut s.selected);
    (s.fired, s.row_of) = (fired, row_of);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tm::TmHyper;
    use crate::rng::derive_rng;

    #[test]
    fn patch_literals_are_pixels_then_position_thermometers() {
        // 3×3 image, 2×2 patches: 4 positions, 4 pixels + 1 y bit + 1 x bit per patch.
        let spec = PatchSpec {
            width: 3,
            height: 3,
            channels: 1,
            patch: 2,
        };
        assert_eq!((spec.positions(), spec.patch_features()), (4, 6));
        // Image pixels (x, y): (2, 1) and (1, 2) set.
        let image = [(1u64 << 5) | (1 << 7)];
        let mut out = BitRows::new(6, 2);
        spec.patches(&image, &spec.position_words(), &mut out);
        // Position (1, 1) (index 3): pixel (2,1) is patch (1,0) → bit 1; pixel (1,2) is patch
        // (0,1) → bit 2; py = 1 > 0 → bit 4; px = 1 > 0 → bit 5.
        assert_eq!(out.row(3), &[0b110110]);
        // Position (0, 0): only pixel (1,1) would count, and it is clear; no position bits.
        assert_eq!(out.row(0), &[0]);
        // The bit-by-bit path (two channels) gives the same layout for channel 0.
        let two = PatchSpec {
            channels: 2,
            ..spec
        };
        let wide: u64 = (1 << 10) | (1 << 14); // pixels (2,1) and (1,2), channel 0
        let mut out2 = BitRows::new(two.patch_features(), 2);
        two.patches(&[wide], &two.position_words(), &mut out2);
        assert_eq!(out2.row(3), &[(1 << 2) | (1 << 4) | (1 << 8) | (1 << 9)]);
    }

    /// The literals read straight from an image's rows are those of its patch rows, for every
    /// patch size of a 28 × 28 image and for a 64-pixel-wide one.
    #[test]
    fn literals_from_the_image_are_those_of_its_patch_rows() {
        let mut rng = derive_rng(11, "conv-literals", 0);
        for (width, height, patch) in [
            (28, 28, 1),
            (28, 28, 5),
            (28, 28, 10),
            (28, 28, 28),
            (64, 3, 2),
        ] {
            let spec = PatchSpec {
                width,
                height,
                channels: 1,
                patch,
            };
            let bits: Vec<bool> = (0..width * height).map(|_| rng.random::<bool>()).collect();
            let mut image = BitRows::new(width * height, 2);
            image.push(&bits, 0);
            let words = spec.position_words();
            let positions = spec.position_literals(&words);
            let mut rows = BitRows::new(spec.patch_features(), 2);
            spec.patches(image.row(0), &words, &mut rows);
            let mut expected = PatchLiterals::new(spec.patch_features(), spec.positions());
            expected.fill_from_rows(&rows);
            let mut got = positions.clone();
            assert!(spec.literals_from_image(image.row(0), &positions, &mut got));
            assert_eq!(got, expected, "{width}×{height}, patch {patch}");
        }
    }

    /// A 2×2 square (class 1) or a 1×4 bar (class 0) anywhere in a 10×10 image.
    fn shapes(n: usize, rng: &mut FlintRng) -> BitRows {
        let mut rows = BitRows::new(100, 2);
        for _ in 0..n {
            let class = rng.random_range(0..2u32);
            let mut img = vec![false; 100];
            let (x, y) = (rng.random_range(0..6), rng.random_range(0..8));
            let cells: &[(usize, usize)] = if class == 1 {
                &[(0, 0), (1, 0), (0, 1), (1, 1)]
            } else {
                &[(0, 0), (1, 0), (2, 0), (3, 0)]
            };
            for &(dx, dy) in cells {
                img[(y + dy) * 10 + x + dx] = true;
            }
            rows.push(&img, class);
        }
        rows
    }

    fn hyper(clauses: usize, t: i32) -> TmHyper {
        TmHyper {
            weighted: true,
            ..crate::model::tm::testing::hyper(clauses, t, 3.0)
        }
    }

    const SPEC: PatchSpec = PatchSpec {
        width: 10,
        height: 10,
        channels: 1,
        patch: 3,
    };

    /// Translation invariance, learned perfectly by a small weighted machine.
    #[test]
    fn learns_shapes_wherever_they_are() {
        let mut rng = derive_rng(4, "conv", 0);
        let (train, test) = (shapes(1000, &mut rng), shapes(300, &mut rng));
        let mut tm = ConvTm::new(hyper(10, 20), SPEC, 2).unwrap();
        let mut masks = FeedbackMasks::new(3.0, &mut rng);
        for _ in 0..3 {
            tm.fit_epoch(&train, &mut masks, &mut rng);
        }
        assert_eq!(tm.accuracy(&test), 1.0);
        assert!(tm.multiclass().is_some() && tm.coalesced().is_none());
    }

    /// `by-class` epochs visit every row of class 0, then of class 1, each class in data order,
    /// the same order every epoch (the published FedTMOS code's unshuffled fit); on two threads
    /// the sorted rows' two halves alternate (OpenMP's static schedule).
    #[test]
    fn by_class_epochs_visit_the_rows_class_after_class() {
        let mut rng = derive_rng(8, "conv", 0);
        let train = shapes(1001, &mut rng);
        let labels = &train.labels;
        let of = |class: u32| (0..labels.len()).filter(move |&i| labels[i] == class);
        let sorted: Vec<usize> = of(0).chain(of(1)).collect();
        let (first, second) = sorted.split_at(501);
        let mut halves: Vec<usize> = first
            .iter()
            .zip(second)
            .flat_map(|(a, b)| [*a, *b])
            .collect();
        halves.push(first[500]);
        let fit = |threads: Option<usize>, order: &[usize]| {
            let mut tm = ConvTm::new(hyper(10, 20), SPEC, 2).unwrap();
            let mut r = derive_rng(9, "conv-by-class", 0);
            let mut masks = FeedbackMasks::new(3.0, &mut r);
            for _ in 0..3 {
                match threads {
                    Some(t) => tm.fit_epoch_by_class(&train, &mut masks, &mut r, t),
                    None => tm.fit_in_order(&train, order, &mut masks, &mut r),
                }
            }
            tm
        };
        for (threads, order) in [(1, &sorted), (2, &halves)] {
            let (got, want) = (fit(Some(threads), &[]), fit(None, order));
            let (a, b) = (got.multiclass().unwrap(), want.multiclass().unwrap());
            for c in 0..2 {
                assert_eq!(a.include_bits(c), b.include_bits(c), "{threads} threads");
                assert_eq!(a.class_weights(c), b.class_weights(c), "{threads} threads");
            }
        }
    }

    /// One-vs-all with a random stream per class: the same machine for 1, 2 and 3 threads,
    /// every class trained on every example, and it learns as well.
    #[test]
    fn one_vs_all_on_class_streams_is_the_same_for_any_thread_count() {
        let mut rng = derive_rng(6, "conv", 0);
        let (train, test) = (shapes(1000, &mut rng), shapes(300, &mut rng));
        let all = TmHyper {
            negative_sampling: NegativeSampling::All,
            ..hyper(10, 20)
        };
        let fit = |threads: usize| {
            let mut tm = ConvTm::new(all, SPEC, 2).unwrap();
            let mut r = derive_rng(7, "conv-threads", 0);
            let mut masks = FeedbackMasks::new(3.0, &mut r);
            for _ in 0..3 {
                tm.fit_epoch_threaded(&train, &mut masks, &mut r, threads);
            }
            tm
        };
        let one = fit(1);
        for threads in [2, 3] {
            let other = fit(threads);
            let (a, b) = (one.multiclass().unwrap(), other.multiclass().unwrap());
            for c in 0..2 {
                assert_eq!(a.include_bits(c), b.include_bits(c), "{threads} threads");
                assert_eq!(a.class_weights(c), b.class_weights(c), "{threads} threads");
            }
        }
        assert_eq!(
            one.multiclass().unwrap().class_counts().iter().sum::<u64>(),
            3000
        );
        // As well as one stream for everything (fit_epoch), on the same data.
        let mut single = ConvTm::new(all, SPEC, 2).unwrap();
        let mut r = derive_rng(7, "conv-threads", 0);
        let mut masks = FeedbackMasks::new(3.0, &mut r);
        for _ in 0..3 {
            single.fit_epoch(&train, &mut masks, &mut r);
        }
        assert_eq!(single.accuracy(&test), 1.0);
        assert_eq!(one.accuracy(&test), 1.0);
    }

    /// The coalesced form: one bank over patches, signed weights per class.
    #[test]
    fn coalesced_form_learns_shapes_too() {
        let mut rng = derive_rng(5, "conv", 0);
        let (train, test) = (shapes(1000, &mut rng), shapes(300, &mut rng));
        let mut tm = ConvTm::new_coalesced(hyper(20, 20), SPEC, 2, &mut rng).unwrap();
        let mut masks = FeedbackMasks::new(3.0, &mut rng);
        for _ in 0..5 {
            tm.fit_epoch(&train, &mut masks, &mut rng);
        }
        assert_eq!(tm.accuracy(&test), 1.0);
        let c = tm.coalesced().unwrap();
        assert_eq!(c.class_counts().iter().sum::<u64>(), 5000);
    }

    /// Strokes of 28 × 28 images, a class's row and column, with 5 % of pixels flipped.
    fn strokes(n: usize, rng: &mut FlintRng) -> BitRows {
        let mut rows = BitRows::new(784, 10);
        for _ in 0..n {
            let class = rng.random_range(0..10u32);
            let bits: Vec<bool> = (0..784u32)
                .map(|p| {
                    let (r, c) = (p / 28, p % 28);
                    let stroke = (r % 10 == class && c > 4 && c < 24)
                        || (c % 10 == class && r > 4 && r < 24);
                    stroke ^ (rng.random::<f64>() < 0.05)
                })
                .collect();
            rows.push(&bits, class);
        }
        rows
    }

    /// The sha256 of every automaton state and weight of a trained machine.
    fn digest(tm: &ConvTm) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        match &tm.form {
            Form::MultiClass(m) => {
                for c in 0..m.classes() {
                    m.bank(c)
                        .cell_major_planes()
                        .iter()
                        .for_each(|w| h.update(w.to_le_bytes()));
                    m.class_weights(c)
                        .iter()
                        .for_each(|w| h.update(w.to_le_bytes()));
                }
            }
            Form::Coalesced(m) => {
                m.bank()
                    .cell_major_planes()
                    .iter()
                    .for_each(|w| h.update(w.to_le_bytes()));
                for c in 0..m.classes() {
                    m.class_weights(c)
                        .iter()
                        .for_each(|w| h.update(w.to_le_bytes()));
                }
            }
        }
        h.finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Every training path of the convolutional machine, pinned to the states it reached when
    /// recorded: a faster engine must give the same machine for the same seed, draw for draw
    /// (FedTMOS's documented runs replay only so).
    #[test]
    fn training_reaches_the_recorded_states() {
        let data = strokes(300, &mut derive_rng(8, "conv-pin", 0));
        let spec = PatchSpec {
            width: 28,
            height: 28,
            channels: 1,
            patch: 10,
        };
        let h = |sampling| TmHyper {
            clauses: 20,
            t: 100,
            s: 5.0,
            weighted: true,
            negative_sampling: sampling,
            ..TmHyper::default()
        };
        let fit = |mut tm: ConvTm, threads: usize| {
            let mut rng = derive_rng(9, "conv-pin", 0);
            let mut masks = FeedbackMasks::new(5.0, &mut rng);
            for _ in 0..2 {
                match threads {
                    0 => tm.fit_epoch(&data, &mut masks, &mut rng),
                    n => tm.fit_epoch_threaded(&data, &mut masks, &mut rng, n),
                }
            }
            digest(&tm)
        };
        let all = ConvTm::new(h(NegativeSampling::All), spec, 10).unwrap();
        let uniform = ConvTm::new(h(NegativeSampling::Uniform), spec, 10).unwrap();
        let mut r = derive_rng(10, "conv-pin", 0);
        let coalesced =
            ConvTm::new_coalesced(h(NegativeSampling::Uniform), spec, 10, &mut r).unwrap();
        let got = [
            fit(all.clone(), 0),
            fit(all, 2),
            fit(uniform, 0),
            fit(coalesced, 0),
        ];
        assert_eq!(
            got,
            [
                "174718775ddc435d",
                "d11facbb631013f5",
                "a44160fe0719f2c9",
                "63d7b04cc1384f9c"
            ]
        );
    }

    #[test]
    fn patches_must_fit_the_image() {
        let h = TmHyper::default().check().unwrap();
        let spec = PatchSpec {
            width: 4,
            height: 4,
            channels: 1,
            patch: 5,
        };
        assert!(
            ConvTm::new(h, spec, 2)
                .unwrap_err()
                .contains("does not fit")
        );
    }
}
