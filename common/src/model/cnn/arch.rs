//! A network's layers and the shapes they give: where each layer's parameters sit in the one
//! flat vector that is trained, averaged and sent.

use serde::{Deserialize, Serialize};

use crate::{FlintError, Result};

/// The networks Flint trains, by name (`cnn.architecture`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ArchName {
    /// FLIS's LeNet (conv 20 and 50 5×5, max-pool, fc 500, fc classes): 431,080 parameters on
    /// MNIST, TPFL Table 5's 1.64 MB per model as float32.
    #[default]
    Lenet,
    /// LeNet-5 (LeCun et al. 1998: conv 6 and 16 5×5, max-pool, fc 120, 84, classes) on the
    /// image padded by 2, the "5-layer CNN" of FedTMOS §5 after Dai et al. 2024: 61,706
    /// parameters on MNIST, FedTMOS Table 2's 0.25 MB per upload as float32.
    Lenet5,
    /// FedTMOS Table 7's "CNN2", the network of its OT-Fusion, RegMean and FedFisher columns
    /// (Jhunjhunwala et al.'s LeNet: LeNet-5's layers on the unpadded image, no biases, so that
    /// neurons align by their weights alone): 44,190 parameters on MNIST, Table 2's 0.18 MB.
    Cnn2,
}

/// One layer. Convolutions have stride 1 and no padding of their own (a `Pad` before one
/// gives it); a dense layer after a spatial one reads it flattened channel by channel (as
/// PyTorch's `flatten(1)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// Zeros around each plane, `by` wide.
    Pad {
        by: usize,
    },
    Conv {
        out: usize,
        kernel: usize,
        bias: bool,
    },
    MaxPool {
        size: usize,
    },
    Relu,
    Dense {
        out: usize,
        bias: bool,
    },
}

/// A convolution with biases.
pub const fn conv(out: usize, kernel: usize) -> Layer {
    Layer::Conv {
        out,
        kernel,
        bias: true,
    }
}

/// A dense layer with biases.
pub const fn dense(out: usize) -> Layer {
    Layer::Dense { out, bias: true }
}

/// An activation's shape for one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Spatial { c: usize, h: usize, w: usize },
    Flat(usize),
}

impl Shape {
    pub fn len(self) -> usize {
        match self {
            Shape::Spatial { c, h, w } => c * h * w,
            Shape::Flat(n) => n,
        }
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// A layer with its input and output shapes and, for conv and dense, where its weights
/// (then biases) start in the parameter vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub layer: Layer,
    pub input: Shape,
    pub output: Shape,
    pub offset: usize,
    /// Weights then biases: 0 for padding, pooling and ReLU.
    pub params: usize,
}

impl Placed {
    /// (weights, biases) counts.
    pub fn split(&self) -> (usize, usize) {
        let biases = |out, bias: bool| if bias { out } else { 0 };
        match self.layer {
            Layer::Conv { out, bias, .. } | Layer::Dense { out, bias } => {
                let b = biases(out, bias);
                (self.params - b, b)
            }
            _ => (0, 0),
        }
    }

    /// Output neurons (a convolution's channels): 0 for padding, pooling and ReLU.
    pub fn neurons(&self) -> usize {
        match self.layer {
            Layer::Conv { out, .. } | Layer::Dense { out, .. } => out,
            _ => 0,
        }
    }

    /// What one weight's fan-in is: the bound of PyTorch's default initialization.
    pub fn fan_in(&self) -> usize {
        self.split().0.checked_div(self.neurons()).unwrap_or(0)
    }
}

/// A network for inputs of one shape and a number of classes, every shape checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Architecture {
    pub name: ArchName,
    pub input: Shape,
    pub layers: Vec<Placed>,
    pub params: usize,
}

impl Architecture {
    /// `name` for `channels`×`side`×`side` images and `classes` classes.
    pub fn new(name: ArchName, channels: usize, side: usize, classes: usize) -> Result<Self> {
        let layers = match name {
            ArchName::Lenet => vec![
                conv(20, 5),
                Layer::MaxPool { size: 2 },
                Layer::Relu,
                conv(50, 5),
                Layer::MaxPool { size: 2 },
                Layer::Relu,
                dense(500),
                Layer::Relu,
                dense(classes),
            ],
            ArchName::Lenet5 => [vec![Layer::Pad { by: 2 }], lenet5(classes, true)].concat(),
            ArchName::Cnn2 => lenet5(classes, false),
        };
        let input = Shape::Spatial {
            c: channels,
            h: side,
            w: side,
        };
        Self::place(name, input, &layers)
    }

    pub(crate) fn place(name: ArchName, input: Shape, layers: &[Layer]) -> Result<Self> {
        let (mut shape, mut offset, mut placed) = (input, 0, Vec::with_capacity(layers.len()));
        for &layer in layers {
            let (output, params) = step(shape, layer).ok_or_else(|| {
                FlintError::Config(format!(
                    "a {layer:?} layer cannot take a {shape:?} input (the images are too small for {name:?})"
                ))
            })?;
            placed.push(Placed {
                layer,
                input: shape,
                output,
                offset,
                params,
            });
            (shape, offset) = (output, offset + params);
        }
        Ok(Architecture {
            name,
            input,
            layers: placed,
            params: offset,
        })
    }

    /// Logits per sample.
    pub fn classes(&self) -> usize {
        self.layers.last().map_or(0, |l| l.output.len())
    }
}

/// LeNet-5's layers (LeCun et al. 1998), with or without biases.
fn lenet5(classes: usize, bias: bool) -> Vec<Layer> {
    let conv = |out| Layer::Conv {
        out,
        kernel: 5,
        bias,
    };
    let dense = |out| Layer::Dense { out, bias };
    vec![
        conv(6),
        Layer::MaxPool { size: 2 },
        Layer::Relu,
        conv(16),
        Layer::MaxPool { size: 2 },
        Layer::Relu,
        dense(120),
        Layer::Relu,
        dense(84),
        Layer::Relu,
        dense(classes),
    ]
}

/// A layer's output shape and parameter count, `None` where the input does not fit.
fn step(input: Shape, layer: Layer) -> Option<(Shape, usize)> {
    match (layer, input) {
        (Layer::Pad { by }, Shape::Spatial { c, h, w }) => Some((
            Shape::Spatial {
                c,
                h: h + 2 * by,
                w: w + 2 * by,
            },
            0,
        )),
        (Layer::Conv { out, kernel, bias }, Shape::Spatial { c, h, w }) => {
            let (h, w) = (h.checked_sub(kernel)? + 1, w.checked_sub(kernel)? + 1);
            let biases = if bias { out } else { 0 };
            Some((
                Shape::Spatial { c: out, h, w },
                out * c * kernel * kernel + biases,
            ))
        }
        (Layer::MaxPool { size }, Shape::Spatial { c, h, w }) if h >= size && w >= size => Some((
            Shape::Spatial {
                c,
                h: h / size,
                w: w / size,
            },
            0,
        )),
        (Layer::Relu, shape) => Some((shape, 0)),
        (Layer::Dense { out, bias }, shape) if out > 0 => {
            let biases = if bias { out } else { 0 };
            Some((Shape::Flat(out), out * shape.len() + biases))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TPFL Table 5 gives FedAvg's and FedProx's model as 1.64 MB: FLIS's LeNet on MNIST is
    /// 431,080 float32 parameters = 1.644 MiB.
    #[test]
    fn lenet_on_mnist_is_table_5s_model() {
        let a = Architecture::new(ArchName::Lenet, 1, 28, 10).unwrap();
        assert_eq!(a.params, 431_080);
        let counts: Vec<usize> = a
            .layers
            .iter()
            .map(|l| l.params)
            .filter(|&p| p > 0)
            .collect();
        assert_eq!(counts, [520, 25_050, 400_500, 5_010]);
        assert_eq!(a.layers[6].input, Shape::Spatial { c: 50, h: 4, w: 4 });
        assert_eq!(a.classes(), 10);
        assert!((a.params as f64 * 4.0 / (1u64 << 20) as f64 - 1.644).abs() < 1e-3);
    }

    /// FedTMOS §5's CNN (Dai et al. 2024's LeNet-5): 61,706 parameters on MNIST (FedTMOS
    /// Appendix: "a simple CNN, which might involve 61,706 weights"), 0.25 MB as float32.
    #[test]
    fn lenet5_on_mnist_is_fedtmos_cnn() {
        let a = Architecture::new(ArchName::Lenet5, 1, 28, 10).unwrap();
        assert_eq!(a.params, 61_706);
        assert_eq!(a.layers[0].output, Shape::Spatial { c: 1, h: 32, w: 32 });
        assert_eq!(a.layers[7].input, Shape::Spatial { c: 16, h: 5, w: 5 });
        assert!((a.params as f64 * 4.0 / 1e6 - 0.25).abs() < 0.01);
    }

    /// FedTMOS Table 7's CNN2 (Jhunjhunwala et al.'s bias-free LeNet): Table 2 gives OT-Fusion,
    /// RegMean and FedFisher 0.18 MB per upload on MNIST.
    #[test]
    fn cnn2_on_mnist_is_the_fusion_baselines_network() {
        let a = Architecture::new(ArchName::Cnn2, 1, 28, 10).unwrap();
        assert_eq!(a.params, 44_190);
        assert!(a.layers.iter().all(|l| l.split().1 == 0));
        assert_eq!(a.layers[6].input, Shape::Spatial { c: 16, h: 4, w: 4 });
        assert!((a.params as f64 * 4.0 / 1e6 - 0.18).abs() < 0.005);
    }

    #[test]
    fn images_too_small_for_the_network_are_refused() {
        let e = Architecture::new(ArchName::Lenet, 1, 8, 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot take"), "{e}");
    }
}
