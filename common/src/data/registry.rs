//! Known datasets: where their files live below the data directory and their sha256.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::csv::CsvSpec;
use crate::{FlintError, Result};

/// One file of a known dataset.
pub struct KnownFile {
    pub dataset: &'static str,
    pub path: &'static str,
    pub sha256: &'static str,
    /// The official copy's length: a download longer than this is refused before it is kept.
    pub bytes: u64,
    /// Where `flint data fetch` downloads it from: the canonical copy first, then mirrors.
    pub urls: &'static [&'static str],
}

/// UCI's repository keeps the raw files under this folder; the Internet Archive's copy of it
/// (the `id_` form serves the bytes as archived) is the mirror.
macro_rules! uci {
    ($file:literal) => {
        &[
            concat!("https://archive.ics.uci.edu/ml/machine-learning-databases/", $file),
            concat!(
                "https://web.archive.org/web/2024id_/https://archive.ics.uci.edu/ml/machine-learning-databases/",
                $file
            ),
        ]
    };
}

/// MNIST's official files, as the PyTorch and TensorFlow projects mirror them.
macro_rules! mnist {
    ($file:literal) => {
        &[
            concat!("https://ossci-datasets.s3.amazonaws.com/mnist/", $file),
            concat!("https://storage.googleapis.com/cvdf-datasets/mnist/", $file),
        ]
    };
}

/// Fashion-MNIST's official files (Zalando Research's bucket) and its repository's copy.
macro_rules! fashion {
    ($file:literal) => {
        &[
            concat!(
                "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
                $file
            ),
            concat!(
                "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
                $file
            ),
        ]
    };
}

/// The files Flint knows, with the checksums of the official copies.
pub const KNOWN_FILES: &[KnownFile] = &[
    KnownFile {
        dataset: "magic",
        path: "magic-gamma-telescope/magic04.data",
        sha256: "e9314b7ebd4b4b59a3b3d65f7316663963777b16a46786877651dbbaa640b36a",
        bytes: 1_477_391,
        urls: uci!("magic/magic04.data"),
    },
    KnownFile {
        dataset: "mnist",
        path: "mnist/train-images-idx3-ubyte.gz",
        sha256: "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        bytes: 9_912_422,
        urls: mnist!("train-images-idx3-ubyte.gz"),
    },
    KnownFile {
        dataset: "mnist",
        path: "mnist/train-labels-idx1-ubyte.gz",
        sha256: "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        bytes: 28_881,
        urls: mnist!("train-labels-idx1-ubyte.gz"),
    },
    KnownFile {
        dataset: "mnist",
        path: "mnist/t10k-images-idx3-ubyte.gz",
        sha256: "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        bytes: 1_648_877,
        urls: mnist!("t10k-images-idx3-ubyte.gz"),
    },
    KnownFile {
        dataset: "mnist",
        path: "mnist/t10k-labels-idx1-ubyte.gz",
        sha256: "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        bytes: 4_542,
        urls: mnist!("t10k-labels-idx1-ubyte.gz"),
    },
    KnownFile {
        dataset: "fashion-mnist",
        path: "fashion-mnist/train-images-idx3-ubyte.gz",
        sha256: "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        bytes: 26_421_880,
        urls: fashion!("train-images-idx3-ubyte.gz"),
    },
    KnownFile {
        dataset: "fashion-mnist",
        path: "fashion-mnist/train-labels-idx1-ubyte.gz",
        sha256: "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        bytes: 29_515,
        urls: fashion!("train-labels-idx1-ubyte.gz"),
    },
    KnownFile {
        dataset: "fashion-mnist",
        path: "fashion-mnist/t10k-images-idx3-ubyte.gz",
        sha256: "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        bytes: 4_422_102,
        urls: fashion!("t10k-images-idx3-ubyte.gz"),
    },
    KnownFile {
        dataset: "fashion-mnist",
        path: "fashion-mnist/t10k-labels-idx1-ubyte.gz",
        sha256: "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        bytes: 5_148,
        urls: fashion!("t10k-labels-idx1-ubyte.gz"),
    },
    KnownFile {
        dataset: "breast-cancer",
        path: BREAST_CANCER_FILE,
        sha256: "d606af411f3e5be8a317a5a8b652b425aaf0ff38ca683d5327ffff94c3695f4a",
        bytes: 124_103,
        urls: uci!("breast-cancer-wisconsin/wdbc.data"),
    },
    KnownFile {
        dataset: "adult",
        path: super::adult::TRAIN_FILE,
        sha256: "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
        bytes: 3_974_305,
        urls: uci!("adult/adult.data"),
    },
    KnownFile {
        dataset: "adult",
        path: super::adult::TEST_FILE,
        sha256: "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
        bytes: 2_003_153,
        urls: uci!("adult/adult.test"),
    },
];

const BREAST_CANCER_FILE: &str = "breast-cancer-wisconsin/wdbc.data";

/// Breast Cancer Wisconsin (Diagnostic), UCI's `wdbc.data`: 569 rows, an id, the diagnosis, 30
/// features (ten measurements, each as its mean, standard error and worst value, in that order:
/// `wdbc.names`). Class `B` (benign) = 0, `M` (malignant) = 1: malignant is the positive class of
/// precision (scikit-learn's loader numbers them the other way round).
pub fn breast_cancer() -> CsvSpec {
    let names = ["mean", "se", "worst"].iter().flat_map(|kind| {
        [
            "radius",
            "texture",
            "perimeter",
            "area",
            "smoothness",
            "compactness",
            "concavity",
            "concave_points",
            "symmetry",
            "fractal_dimension",
        ]
        .map(|m| format!("{m}_{kind}"))
    });
    CsvSpec {
        label_column: Some(1),
        skip_columns: vec![0],
        features: Some(30),
        names: names.collect(),
        ..CsvSpec::new(BREAST_CANCER_FILE, vec!["B".into(), "M".into()])
    }
}

/// MAGIC Gamma Telescope (UCI 159): 10 features, class `g` (gamma) = 0, `h` (hadron) = 1.
/// The hadron class is the positive class of precision/recall, as in the AHP paper.
pub fn magic() -> CsvSpec {
    let names = [
        "fLength", "fWidth", "fSize", "fConc", "fConc1", "fAsym", "fM3Long", "fM3Trans", "fAlpha",
        "fDist",
    ];
    CsvSpec {
        label_column: Some(10),
        features: Some(10),
        names: names.map(String::from).to_vec(),
        ..CsvSpec::new(KNOWN_FILES[0].path, vec!["g".into(), "h".into()])
    }
}

/// Outcome of checking one known file.
#[derive(Debug, PartialEq, Eq)]
pub enum FileCheck {
    Ok,
    Missing,
    Mismatch { actual: String },
}

pub fn verify(data_dir: &Path, file: &KnownFile) -> Result<FileCheck> {
    let path = data_dir.join(file.path);
    let actual = match sha256(&path) {
        Ok(a) => a,
        Err(FlintError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(FileCheck::Missing);
        }
        Err(e) => return Err(e),
    };
    Ok(if actual == file.sha256 {
        FileCheck::Ok
    } else {
        FileCheck::Mismatch { actual }
    })
}

/// The sha256 of a file, in lowercase hex.
pub fn sha256(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).map_err(|e| FlintError::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(|e| FlintError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(crate::hex::encode(&hasher.finalize()))
}
