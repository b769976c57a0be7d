//! The model zoo: layer-by-layer shapes of well-known networks, giving per-sample forward FLOPs,
//! parameter counts and activation sizes. Architectures follow the papers and their reference
//! implementations (torchvision, the Caffe model zoo, Google's BERT); parameter totals are tested
//! against the published counts. This module only describes networks; timing them on a GPU is
//! `synth`'s job.

use crate::error::{Error, Result};
use serde::Serialize;

/// What a layer computes, as far as its cost is concerned. Importers map their op names to these
/// so measured and synthetic layers can be lined up by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerKind {
    /// Dense convolution (cuDNN-class GEMM work).
    Conv,
    /// Depthwise or grouped convolution with few channels per group (memory-bound in practice).
    DepthwiseConv,
    /// Fully connected layer / GEMM with weights.
    Linear,
    /// Batched matrix product without weights (attention scores and context).
    MatMul,
    BatchNorm,
    LayerNorm,
    /// ReLU, ReLU6, GELU and other element-wise activations.
    Activation,
    /// Max or average pooling.
    Pool,
    /// Local response normalisation (AlexNet, GoogLeNet).
    Lrn,
    /// Residual addition.
    Add,
    Concat,
    Dropout,
    Softmax,
    /// Table look-up (BERT embeddings).
    Embedding,
    /// Anything else (reshapes, inputs): no cost in the model.
    Other,
}

/// One layer of a zoo model. Sizes are per sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ZooLayer {
    pub name: String,
    pub kind: LayerKind,
    /// Learnable parameters (weights and biases; batch-norm running statistics are not counted).
    pub params: u64,
    /// The layer's parameter tensors, in the order the framework registers them (weight before
    /// bias; BN gamma before beta; BERT's query, key, value each with its bias), as element
    /// counts summing to `params`. Gradient fusion, buckets and negotiation act per tensor.
    pub tensors: Vec<u64>,
    /// Forward floating-point operations per sample (a multiply-add counts as 2).
    pub flops: f64,
    /// Input elements read per sample (all inputs).
    pub in_elems: u64,
    /// Output elements written per sample.
    pub out_elems: u64,
    /// For convolutions and linear layers: the GEMM reduction length (input channels per group
    /// times kernel area, or input features) and, for convolutions, kernel size and stride.
    pub reduction: u64,
    pub kernel: u64,
    pub stride: u64,
}

/// A network: layers in forward order and the size of one input sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Model {
    pub name: &'static str,
    pub layers: Vec<ZooLayer>,
    /// Elements of one input sample (e.g. 3*224*224, or the sequence length for BERT).
    pub input_elems: u64,
}

impl Model {
    /// Looks a model up by name (case-insensitive; `-`/`_` ignored). BERT models take the sequence
    /// length from `seq_len` (default 128), CNNs ignore it.
    pub fn by_name(name: &str, seq_len: Option<u32>) -> Result<Model> {
        let key: String =
            name.to_ascii_lowercase().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '.').collect();
        let seq = seq_len.unwrap_or(128) as u64;
        let model = match key.as_str() {
            "alexnet" | "alexnetoriginal" | "alexnetkrizhevsky" => alexnet_original(),
            "alexnetowt" | "alexnettorchvision" => alexnet_owt(),
            "alexnetbn" | "alexnetgradientflow" => alexnet_bn(),
            "vgg11" | "vgga" => vgg("vgg11", &VGG11),
            "vgg16" => vgg("vgg16", &VGG16),
            "vgg19" => vgg("vgg19", &VGG19),
            "resnet18" => resnet("resnet18", false, [2, 2, 2, 2]),
            "resnet34" => resnet("resnet34", false, [3, 4, 6, 3]),
            "resnet50" => resnet("resnet50", true, [3, 4, 6, 3]),
            "googlenet" | "inceptionv1" => googlenet(),
            "mobilenetv2" => mobilenet_v2(),
            "shufflenetv2" | "shufflenet" | "shufflenetv2x1.0" => shufflenet_v2(),
            "mnasnet1.3" | "mnasnet13" => mnasnet(1.3),
            "bertbase" => bert("bert-base", 12, 768, 12, seq),
            "bertlarge" => bert("bert-large", 24, 1024, 16, seq),
            _ => {
                return Err(Error::invalid(
                    "model",
                    format!("unknown model `{name}`; known: {}", MODEL_NAMES.join(", ")),
                ))
            }
        };
        Ok(model)
    }

    /// Total learnable parameters.
    pub fn params(&self) -> u64 {
        self.layers.iter().map(|l| l.params).sum()
    }

    /// Forward FLOPs per sample.
    pub fn flops(&self) -> f64 {
        self.layers.iter().map(|l| l.flops).sum()
    }
}

/// True when `name` is one of the zoo's models (any accepted spelling).
pub fn is_zoo_name(name: &str) -> bool {
    Model::by_name(name, None).is_ok()
}

/// Names accepted by [`Model::by_name`] (canonical spellings).
pub const MODEL_NAMES: &[&str] = &[
    "alexnet",
    "alexnet-owt",
    "alexnet-bn",
    "vgg11",
    "vgg16",
    "vgg19",
    "resnet18",
    "resnet34",
    "resnet50",
    "googlenet",
    "mobilenet-v2",
    "shufflenet-v2",
    "mnasnet1.3",
    "bert-base",
    "bert-large",
];

/// Builds a CNN layer by layer, tracking the current activation shape (channels, height, width).
struct Cnn {
    layers: Vec<ZooLayer>,
    c: u64,
    h: u64,
    w: u64,
}

/// Output size of a window of `k` with `stride` and `pad` over `n` (floor or Caffe's ceil mode).
fn out_dim(n: u64, k: u64, stride: u64, pad: u64, ceil: bool) -> u64 {
    let span = n + 2 * pad - k;
    let mut o = if ceil { span.div_ceil(stride) } else { span / stride } + 1;
    // Caffe/PyTorch: the last window must start inside the (left-padded) input.
    if ceil && (o - 1) * stride >= n + pad {
        o -= 1;
    }
    o
}

impl Cnn {
    fn new(c: u64, h: u64, w: u64) -> Self {
        Cnn { layers: Vec::new(), c, h, w }
    }
    fn elems(&self) -> u64 {
        self.c * self.h * self.w
    }
    fn shape(&self) -> (u64, u64, u64) {
        (self.c, self.h, self.w)
    }
    fn set_shape(&mut self, s: (u64, u64, u64)) {
        (self.c, self.h, self.w) = s;
    }
    fn push(&mut self, name: &str, kind: LayerKind, tensors: Vec<u64>, flops: f64, in_elems: u64) {
        let out_elems = self.elems();
        self.layers.push(ZooLayer {
            name: name.to_string(),
            kind,
            params: tensors.iter().sum(),
            tensors,
            flops,
            in_elems,
            out_elems,
            reduction: 0,
            kernel: 0,
            stride: 0,
        });
    }

    /// Convolution with square kernel `k`; `groups` splits channels; `bias` adds one per output.
    #[allow(clippy::too_many_arguments)]
    fn conv_g(&mut self, name: &str, out: u64, k: u64, stride: u64, pad: u64, groups: u64, bias: bool) {
        let (cin, ine) = (self.c, self.elems());
        self.h = out_dim(self.h, k, stride, pad, false);
        self.w = out_dim(self.w, k, stride, pad, false);
        self.c = out;
        let weights = out * (cin / groups) * k * k;
        let flops = 2.0 * weights as f64 * (self.h * self.w) as f64;
        let depthwise = groups > 1 && cin / groups <= 8;
        let kind = if depthwise { LayerKind::DepthwiseConv } else { LayerKind::Conv };
        let tensors = if bias { vec![weights, out] } else { vec![weights] };
        self.push(name, kind, tensors, flops, ine);
        let last = self.layers.last_mut().expect("just pushed");
        (last.reduction, last.kernel, last.stride) = ((cin / groups) * k * k, k, stride);
    }
    fn conv(&mut self, name: &str, out: u64, k: u64, stride: u64, pad: u64, bias: bool) {
        self.conv_g(name, out, k, stride, pad, 1, bias);
    }
    fn bn(&mut self, name: &str) {
        let e = self.elems();
        self.push(name, LayerKind::BatchNorm, vec![self.c, self.c], 4.0 * e as f64, e);
    }
    fn act(&mut self, name: &str) {
        let e = self.elems();
        self.push(name, LayerKind::Activation, vec![], e as f64, e);
    }
    fn lrn(&mut self, name: &str, size: u64) {
        let e = self.elems();
        self.push(name, LayerKind::Lrn, vec![], (2 * size + 4) as f64 * e as f64, e);
    }
    fn pool(&mut self, name: &str, k: u64, stride: u64, pad: u64, ceil: bool) {
        let ine = self.elems();
        self.h = out_dim(self.h, k, stride, pad, ceil);
        self.w = out_dim(self.w, k, stride, pad, ceil);
        let flops = (k * k * self.elems()) as f64;
        self.push(name, LayerKind::Pool, vec![], flops, ine);
    }
    fn global_pool(&mut self, name: &str) {
        let ine = self.elems();
        (self.h, self.w) = (1, 1);
        self.push(name, LayerKind::Pool, vec![], ine as f64, ine);
    }
    fn dropout(&mut self, name: &str) {
        let e = self.elems();
        self.push(name, LayerKind::Dropout, vec![], e as f64, e);
    }
    fn fc(&mut self, name: &str, out: u64) {
        let inp = self.elems();
        (self.c, self.h, self.w) = (out, 1, 1);
        self.push(name, LayerKind::Linear, vec![inp * out, out], 2.0 * (inp * out) as f64, inp);
        self.layers.last_mut().expect("just pushed").reduction = inp;
    }
    /// Residual addition of two tensors of the current shape.
    fn add(&mut self, name: &str) {
        let e = self.elems();
        self.push(name, LayerKind::Add, vec![], e as f64, 2 * e);
    }
    /// Concatenation of branches whose channel counts sum to `channels` (spatial size unchanged).
    fn concat(&mut self, name: &str, channels: u64) {
        self.c = channels;
        let e = self.elems();
        self.push(name, LayerKind::Concat, vec![], 0.0, e);
    }
    fn finish(self, name: &'static str, input_elems: u64) -> Model {
        Model { name, layers: self.layers, input_elems }
    }
}

/// Krizhevsky et al. 2012 as in Caffe's bvlc_alexnet: 227x227 input, LRN, two-group convolutions.
fn alexnet_original() -> Model {
    let mut n = Cnn::new(3, 227, 227);
    n.conv("conv1", 96, 11, 4, 0, true);
    n.act("relu1");
    n.lrn("norm1", 5);
    n.pool("pool1", 3, 2, 0, true);
    n.conv_g("conv2", 256, 5, 1, 2, 2, true);
    n.act("relu2");
    n.lrn("norm2", 5);
    n.pool("pool2", 3, 2, 0, true);
    n.conv("conv3", 384, 3, 1, 1, true);
    n.act("relu3");
    n.conv_g("conv4", 384, 3, 1, 1, 2, true);
    n.act("relu4");
    n.conv_g("conv5", 256, 3, 1, 1, 2, true);
    n.act("relu5");
    n.pool("pool5", 3, 2, 0, true);
    alexnet_classifier(&mut n);
    n.finish("alexnet", 3 * 227 * 227)
}

/// The batch-norm AlexNet GradientFlow trains (Sun et al., Fig. 5: 27 layers counting data and
/// loss, 60.9 M parameters in 26 tensors): the original grouped AlexNet with batch normalisation
/// after every convolution in place of LRN.
fn alexnet_bn() -> Model {
    let mut n = Cnn::new(3, 227, 227);
    let convs: [(u64, u64, u64, u64, u64, bool); 5] = [
        (96, 11, 4, 0, 1, true),
        (256, 5, 1, 2, 2, true),
        (384, 3, 1, 1, 1, false),
        (384, 3, 1, 1, 2, false),
        (256, 3, 1, 1, 2, true),
    ];
    for (i, (out, k, stride, pad, groups, pool)) in convs.into_iter().enumerate() {
        let c = i + 1;
        n.conv_g(&format!("conv{c}"), out, k, stride, pad, groups, true);
        n.bn(&format!("bn{c}"));
        n.act(&format!("relu{c}"));
        if pool {
            n.pool(&format!("pool{c}"), 3, 2, 0, true);
        }
    }
    alexnet_classifier(&mut n);
    n.finish("alexnet-bn", 3 * 227 * 227)
}

fn alexnet_classifier(n: &mut Cnn) {
    n.dropout("drop6");
    n.fc("fc6", 4096);
    n.act("relu6");
    n.dropout("drop7");
    n.fc("fc7", 4096);
    n.act("relu7");
    n.fc("fc8", 1000);
}

/// Krizhevsky's "one weird trick" AlexNet (torchvision, convnet-benchmarks): 64-192-384-256-256
/// channels, no groups, no LRN, 224x224 input.
fn alexnet_owt() -> Model {
    let mut n = Cnn::new(3, 224, 224);
    n.conv("conv1", 64, 11, 4, 2, true);
    n.act("relu1");
    n.pool("pool1", 3, 2, 0, false);
    n.conv("conv2", 192, 5, 1, 2, true);
    n.act("relu2");
    n.pool("pool2", 3, 2, 0, false);
    n.conv("conv3", 384, 3, 1, 1, true);
    n.act("relu3");
    n.conv("conv4", 256, 3, 1, 1, true);
    n.act("relu4");
    n.conv("conv5", 256, 3, 1, 1, true);
    n.act("relu5");
    n.pool("pool5", 3, 2, 0, false);
    alexnet_classifier(&mut n);
    n.finish("alexnet-owt", 3 * 224 * 224)
}

/// VGG configurations (Simonyan and Zisserman, Table 1): channels, 0 for a 2x2 max-pool.
const VGG11: [u64; 13] = [64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0];
const VGG16: [u64; 18] = [64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0];
const VGG19: [u64; 21] = [64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0];

fn vgg(name: &'static str, cfg: &[u64]) -> Model {
    let mut n = Cnn::new(3, 224, 224);
    let (mut conv, mut pool) = (0, 0);
    for &c in cfg {
        if c == 0 {
            pool += 1;
            n.pool(&format!("pool{pool}"), 2, 2, 0, false);
        } else {
            conv += 1;
            n.conv(&format!("conv{conv}"), c, 3, 1, 1, true);
            n.act(&format!("relu{conv}"));
        }
    }
    n.fc("fc6", 4096);
    n.act("relu6");
    n.dropout("drop6");
    n.fc("fc7", 4096);
    n.act("relu7");
    n.dropout("drop7");
    n.fc("fc8", 1000);
    n.finish(name, 3 * 224 * 224)
}

/// He et al. 2016 as in torchvision (v1.5: stride on the 3x3 convolution of a bottleneck).
fn resnet(name: &'static str, bottleneck: bool, blocks: [u32; 4]) -> Model {
    let mut n = Cnn::new(3, 224, 224);
    n.conv("conv1", 64, 7, 2, 3, false);
    n.bn("bn1");
    n.act("relu");
    n.pool("maxpool", 3, 2, 1, false);
    let expansion = if bottleneck { 4 } else { 1 };
    for (stage, &count) in blocks.iter().enumerate() {
        let width = 64u64 << stage;
        for b in 0..count {
            let p = format!("layer{}.{b}", stage + 1);
            let stride = if stage > 0 && b == 0 { 2 } else { 1 };
            let input = n.shape();
            if bottleneck {
                n.conv(&format!("{p}.conv1"), width, 1, 1, 0, false);
                n.bn(&format!("{p}.bn1"));
                n.act(&format!("{p}.relu1"));
                n.conv(&format!("{p}.conv2"), width, 3, stride, 1, false);
                n.bn(&format!("{p}.bn2"));
                n.act(&format!("{p}.relu2"));
                n.conv(&format!("{p}.conv3"), width * expansion, 1, 1, 0, false);
                n.bn(&format!("{p}.bn3"));
            } else {
                n.conv(&format!("{p}.conv1"), width, 3, stride, 1, false);
                n.bn(&format!("{p}.bn1"));
                n.act(&format!("{p}.relu1"));
                n.conv(&format!("{p}.conv2"), width, 3, 1, 1, false);
                n.bn(&format!("{p}.bn2"));
            }
            if stride != 1 || input.0 != width * expansion {
                let out = n.shape();
                n.set_shape(input);
                n.conv(&format!("{p}.downsample.0"), width * expansion, 1, stride, 0, false);
                n.bn(&format!("{p}.downsample.1"));
                debug_assert_eq!(n.shape(), out);
            }
            n.add(&format!("{p}.add"));
            n.act(&format!("{p}.relu"));
        }
    }
    n.global_pool("avgpool");
    n.fc("fc", 1000);
    n.finish(name, 3 * 224 * 224)
}

/// Szegedy et al. 2015 as in Caffe's bvlc_googlenet, without the auxiliary classifiers.
fn googlenet() -> Model {
    let mut n = Cnn::new(3, 224, 224);
    n.conv("conv1/7x7_s2", 64, 7, 2, 3, true);
    n.act("conv1/relu");
    n.pool("pool1/3x3_s2", 3, 2, 0, true);
    n.lrn("pool1/norm1", 5);
    n.conv("conv2/3x3_reduce", 64, 1, 1, 0, true);
    n.act("conv2/relu_reduce");
    n.conv("conv2/3x3", 192, 3, 1, 1, true);
    n.act("conv2/relu");
    n.lrn("conv2/norm2", 5);
    n.pool("pool2/3x3_s2", 3, 2, 0, true);
    // (name, 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection); 0 = max-pool between stages.
    let blocks: [(&str, [u64; 6]); 11] = [
        ("3a", [64, 96, 128, 16, 32, 32]),
        ("3b", [128, 128, 192, 32, 96, 64]),
        ("pool3", [0; 6]),
        ("4a", [192, 96, 208, 16, 48, 64]),
        ("4b", [160, 112, 224, 24, 64, 64]),
        ("4c", [128, 128, 256, 24, 64, 64]),
        ("4d", [112, 144, 288, 32, 64, 64]),
        ("4e", [256, 160, 320, 32, 128, 128]),
        ("pool4", [0; 6]),
        ("5a", [256, 160, 320, 32, 128, 128]),
        ("5b", [384, 192, 384, 48, 128, 128]),
    ];
    for (tag, [b1, r3, b3, r5, b5, pp]) in blocks {
        if b1 == 0 {
            n.pool(&format!("{tag}/3x3_s2"), 3, 2, 0, true);
            continue;
        }
        let p = format!("inception_{tag}");
        let input = n.shape();
        for (branch, layers) in
            [("1x1", vec![(b1, 1)]), ("3x3", vec![(r3, 1), (b3, 3)]), ("5x5", vec![(r5, 1), (b5, 5)])]
        {
            n.set_shape(input);
            for (i, (c, k)) in layers.iter().enumerate() {
                let suffix = if layers.len() == 2 && i == 0 { "_reduce" } else { "" };
                n.conv(&format!("{p}/{branch}{suffix}"), *c, *k, 1, k / 2, true);
                n.act(&format!("{p}/relu_{branch}{suffix}"));
            }
        }
        n.set_shape(input);
        n.pool(&format!("{p}/pool"), 3, 1, 1, true);
        n.conv(&format!("{p}/pool_proj"), pp, 1, 1, 0, true);
        n.act(&format!("{p}/relu_pool_proj"));
        n.concat(&format!("{p}/output"), b1 + b3 + b5 + pp);
    }
    n.global_pool("pool5/7x7_s1");
    n.dropout("pool5/drop_7x7_s1");
    n.fc("loss3/classifier", 1000);
    n.finish("googlenet", 3 * 224 * 224)
}

/// Sandler et al. 2018 as in torchvision (width 1.0).
fn mobilenet_v2() -> Model {
    let mut n = Cnn::new(3, 224, 224);
    n.conv("features.0.conv", 32, 3, 2, 1, false);
    n.bn("features.0.bn");
    n.act("features.0.relu6");
    // (expansion t, channels c, repeats n, stride s) from the paper's Table 2.
    let settings =
        [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)];
    let mut block = 1;
    for (t, c, reps, s) in settings {
        for r in 0..reps {
            let stride = if r == 0 { s } else { 1 };
            inverted_residual(&mut n, &format!("features.{block}"), c, 3, stride, t);
            block += 1;
        }
    }
    n.conv("features.18.conv", 1280, 1, 1, 0, false);
    n.bn("features.18.bn");
    n.act("features.18.relu6");
    n.global_pool("avgpool");
    n.dropout("classifier.0");
    n.fc("classifier.1", 1000);
    n.finish("mobilenet-v2", 3 * 224 * 224)
}

/// The MobileNet v2 / MNASNet block: 1x1 expand (skipped when t = 1), k x k depthwise, 1x1
/// project, residual addition when shapes allow.
fn inverted_residual(n: &mut Cnn, p: &str, out: u64, k: u64, stride: u64, t: u64) {
    let input = n.shape();
    let hidden = input.0 * t;
    if t != 1 {
        n.conv(&format!("{p}.expand"), hidden, 1, 1, 0, false);
        n.bn(&format!("{p}.expand_bn"));
        n.act(&format!("{p}.expand_relu"));
    }
    n.conv_g(&format!("{p}.dw"), hidden, k, stride, k / 2, hidden, false);
    n.bn(&format!("{p}.dw_bn"));
    n.act(&format!("{p}.dw_relu"));
    n.conv(&format!("{p}.project"), out, 1, 1, 0, false);
    n.bn(&format!("{p}.project_bn"));
    if stride == 1 && input.0 == out {
        n.add(&format!("{p}.add"));
    }
}

/// Ma et al. 2018, ShuffleNet v2 1.0x as in torchvision.
fn shufflenet_v2() -> Model {
    let mut n = Cnn::new(3, 224, 224);
    n.conv("conv1", 24, 3, 2, 1, false);
    n.bn("conv1.bn");
    n.act("conv1.relu");
    n.pool("maxpool", 3, 2, 1, false);
    for (stage, (reps, out)) in [(4u64, 116u64), (8, 232), (4, 464)].into_iter().enumerate() {
        for r in 0..reps {
            let p = format!("stage{}.{r}", stage + 2);
            let half = out / 2;
            let input = n.shape();
            if r == 0 {
                // Down-sampling unit: both branches see the whole input.
                n.conv_g(&format!("{p}.branch1.dw"), input.0, 3, 2, 1, input.0, false);
                n.bn(&format!("{p}.branch1.dw_bn"));
                n.conv(&format!("{p}.branch1.pw"), half, 1, 1, 0, false);
                n.bn(&format!("{p}.branch1.pw_bn"));
                n.act(&format!("{p}.branch1.relu"));
                n.set_shape(input);
            } else {
                n.set_shape((half, input.1, input.2)); // channel split: half passes through
            }
            n.conv(&format!("{p}.branch2.pw1"), half, 1, 1, 0, false);
            n.bn(&format!("{p}.branch2.pw1_bn"));
            n.act(&format!("{p}.branch2.relu1"));
            n.conv_g(&format!("{p}.branch2.dw"), half, 3, if r == 0 { 2 } else { 1 }, 1, half, false);
            n.bn(&format!("{p}.branch2.dw_bn"));
            n.conv(&format!("{p}.branch2.pw2"), half, 1, 1, 0, false);
            n.bn(&format!("{p}.branch2.pw2_bn"));
            n.act(&format!("{p}.branch2.relu2"));
            n.concat(&format!("{p}.concat_shuffle"), out);
        }
    }
    n.conv("conv5", 1024, 1, 1, 0, false);
    n.bn("conv5.bn");
    n.act("conv5.relu");
    n.global_pool("globalpool");
    n.fc("fc", 1000);
    n.finish("shufflenet-v2", 3 * 224 * 224)
}

/// torchvision's channel rounding for MNASNet: nearest multiple of 8, never below 90%.
fn mnas_round(v: f64) -> u64 {
    let r = (((v + 4.0) as u64) / 8 * 8).max(8);
    if r as f64 >= 0.9 * v {
        r
    } else {
        r + 8
    }
}

/// Tan et al. 2019, MNASNet-A1 without squeeze-excitation as in torchvision (`mnasnet1_3`).
fn mnasnet(alpha: f64) -> Model {
    let d: Vec<u64> =
        [32.0, 16.0, 24.0, 40.0, 80.0, 96.0, 192.0, 320.0].iter().map(|c| mnas_round(c * alpha)).collect();
    let mut n = Cnn::new(3, 224, 224);
    n.conv("layers.0", d[0], 3, 2, 1, false);
    n.bn("layers.1");
    n.act("layers.2");
    n.conv_g("layers.3", d[0], 3, 1, 1, d[0], false);
    n.bn("layers.4");
    n.act("layers.5");
    n.conv("layers.6", d[1], 1, 1, 0, false);
    n.bn("layers.7");
    // (out, kernel, stride, expansion, repeats)
    let stacks = [
        (d[2], 3, 2, 3, 3),
        (d[3], 5, 2, 3, 3),
        (d[4], 5, 2, 6, 3),
        (d[5], 3, 1, 6, 2),
        (d[6], 5, 2, 6, 4),
        (d[7], 3, 1, 6, 1),
    ];
    for (s, (out, k, stride, t, reps)) in stacks.into_iter().enumerate() {
        for r in 0..reps {
            inverted_residual(&mut n, &format!("stack{}.{r}", s + 8), out, k, if r == 0 { stride } else { 1 }, t);
        }
    }
    n.conv("layers.14", 1280, 1, 1, 0, false);
    n.bn("layers.15");
    n.act("layers.16");
    n.global_pool("mean");
    n.dropout("classifier.0");
    n.fc("classifier.1", 1000);
    n.finish("mnasnet1.3", 3 * 224 * 224)
}

/// Devlin et al. 2019 (BERT, uncased vocabulary of 30522, 512 positions), encoder plus pooler,
/// for sequences of `seq` tokens. Per-sample sizes count all tokens of the sequence.
fn bert(name: &'static str, depth: u32, hidden: u64, heads: u64, seq: u64) -> Model {
    const VOCAB: u64 = 30522;
    let ffn = 4 * hidden;
    let tok = seq * hidden;
    let mut layers = Vec::new();
    let mut push = |name: String, kind: LayerKind, tensors: Vec<u64>, flops: f64, in_elems: u64, out_elems: u64| {
        // GEMM reduction length: input features of a linear layer, the head size for attention.
        let reduction = match kind {
            LayerKind::Linear => (in_elems / seq).max(hidden),
            LayerKind::MatMul => hidden / heads,
            _ => 0,
        };
        let params = tensors.iter().sum();
        layers.push(ZooLayer {
            name,
            kind,
            params,
            tensors,
            flops,
            in_elems,
            out_elems,
            reduction,
            kernel: 0,
            stride: 0,
        });
    };
    // A linear layer's tensors (weight, bias) and its FLOPs over the sequence.
    let linear = |inp: u64, out: u64| (vec![inp * out, out], 2.0 * (seq * inp * out) as f64);
    let norm = || vec![hidden, hidden];
    // Word, position and token-type tables, as in Google's BERT and Hugging Face.
    let tables = vec![VOCAB * hidden, 512 * hidden, 2 * hidden];
    push("embeddings".into(), LayerKind::Embedding, tables, 3.0 * tok as f64, seq, tok);
    push("embeddings.layernorm".into(), LayerKind::LayerNorm, norm(), 8.0 * tok as f64, tok, tok);
    for l in 0..depth {
        let p = format!("encoder.{l}");
        // Query, key and value are three linear layers (three weights, three biases) run as one
        // GEMM here.
        let (_, qkv_f) = linear(hidden, 3 * hidden);
        let qkv_t = [hidden * hidden, hidden].repeat(3);
        push(format!("{p}.attention.qkv"), LayerKind::Linear, qkv_t, qkv_f, tok, 3 * tok);
        let scores = heads * seq * seq;
        push(
            format!("{p}.attention.scores"),
            LayerKind::MatMul,
            vec![],
            2.0 * (seq * seq * hidden) as f64,
            2 * tok,
            scores,
        );
        push(format!("{p}.attention.softmax"), LayerKind::Softmax, vec![], 5.0 * scores as f64, scores, scores);
        push(format!("{p}.attention.dropout"), LayerKind::Dropout, vec![], scores as f64, scores, scores);
        push(
            format!("{p}.attention.context"),
            LayerKind::MatMul,
            vec![],
            2.0 * (seq * seq * hidden) as f64,
            scores + tok,
            tok,
        );
        let (o_t, o_f) = linear(hidden, hidden);
        push(format!("{p}.attention.output"), LayerKind::Linear, o_t, o_f, tok, tok);
        push(format!("{p}.attention.add"), LayerKind::Add, vec![], tok as f64, 2 * tok, tok);
        push(format!("{p}.attention.layernorm"), LayerKind::LayerNorm, norm(), 8.0 * tok as f64, tok, tok);
        let (i_t, i_f) = linear(hidden, ffn);
        push(format!("{p}.intermediate"), LayerKind::Linear, i_t, i_f, tok, seq * ffn);
        push(format!("{p}.gelu"), LayerKind::Activation, vec![], 8.0 * (seq * ffn) as f64, seq * ffn, seq * ffn);
        let (f_t, f_f) = linear(ffn, hidden);
        push(format!("{p}.output"), LayerKind::Linear, f_t, f_f, seq * ffn, tok);
        push(format!("{p}.output.add"), LayerKind::Add, vec![], tok as f64, 2 * tok, tok);
        push(format!("{p}.output.layernorm"), LayerKind::LayerNorm, norm(), 8.0 * tok as f64, tok, tok);
    }
    let (pool_t, _) = linear(hidden, hidden);
    push("pooler".into(), LayerKind::Linear, pool_t, 2.0 * (hidden * hidden) as f64, hidden, hidden);
    Model { name, layers, input_elems: seq }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_sizes_follow_caffe_and_pytorch() {
        assert_eq!(out_dim(227, 11, 4, 0, false), 55);
        assert_eq!(out_dim(55, 3, 2, 0, true), 27);
        assert_eq!(out_dim(112, 3, 2, 0, true), 56); // GoogLeNet pool1 in ceil mode
        assert_eq!(out_dim(112, 3, 2, 1, false), 56); // ResNet max-pool
        assert_eq!(out_dim(14, 3, 2, 0, true), 7);
    }

    #[test]
    fn mnasnet_channel_rounding_matches_torchvision() {
        let d: Vec<u64> =
            [32.0, 16.0, 24.0, 40.0, 80.0, 96.0, 192.0, 320.0].iter().map(|c| mnas_round(c * 1.3)).collect();
        assert_eq!(d, [40, 24, 32, 56, 104, 128, 248, 416]);
    }

    #[test]
    fn every_listed_name_resolves_and_unknown_names_fail() {
        for name in MODEL_NAMES {
            let m = Model::by_name(name, None).unwrap();
            assert!(m.params() > 0 && m.flops() > 0.0, "{name}");
        }
        let e = Model::by_name("lenet", None).unwrap_err().to_string();
        assert!(e.contains("lenet") && e.contains("resnet50"), "{e}");
    }

    #[test]
    fn alexnet_bn_has_gradientflows_layer_and_tensor_counts() {
        let m = Model::by_name("alexnet-bn", None).unwrap();
        assert_eq!(m.layers.len() + 2, 27); // plus the data and loss layers
        let tensors: usize = m
            .layers
            .iter()
            .map(|l| match l.kind {
                LayerKind::Conv | LayerKind::Linear | LayerKind::BatchNorm => 2,
                _ => 0,
            })
            .sum();
        assert_eq!(tensors, 26);
    }

    #[test]
    fn tensors_are_listed_per_layer_and_sum_to_the_parameters() {
        let count = |name: &str| -> usize {
            let m = Model::by_name(name, None).unwrap();
            for l in &m.layers {
                assert_eq!(l.tensors.iter().sum::<u64>(), l.params, "{name} {}", l.name);
                assert!(l.tensors.iter().all(|&t| t > 0), "{name} {}", l.name);
            }
            m.layers.iter().map(|l| l.tensors.len()).sum()
        };
        // torchvision's `len(list(model.parameters()))`: ResNet-50 has 53 convolutions without
        // bias, 53 batch norms (gamma, beta) and the classifier (weight, bias).
        assert_eq!(count("resnet50"), 161);
        assert_eq!(count("resnet18"), 62);
        assert_eq!(count("vgg16"), 32);
        // Hugging Face BertModel: 3 embedding tables, 2 LayerNorm tensors, 16 per encoder layer,
        // and the pooler's weight and bias.
        assert_eq!(count("bert-base"), 3 + 2 + 12 * 16 + 2);
        assert_eq!(count("bert-large"), 3 + 2 + 24 * 16 + 2);
    }

    #[test]
    fn resnet50_forward_flops_match_the_published_4_1_gflops() {
        // He et al. report 3.8 GFLOPs counting multiply-adds once for v1; torchvision's v1.5 is
        // 4.1 G multiply-adds. We count a multiply-add as 2 FLOPs.
        let g = Model::by_name("resnet50", None).unwrap().flops() / 2e9;
        assert!((g - 4.1).abs() < 0.15, "{g} G multiply-adds");
    }
}
