# Sourced by tools/gpu/*.sh: make the CUDA libraries findable under the names cudarc 0.19 dlopens.
# cudarc 0.19 is built against the CUDA 12.8 API and dlopens libcublas.so / .so.12, libnvrtc.so,
# libnccl.so: a CUDA 13 image ships libcublas.so.13 and libnccl.so.2, so link those names.
LIBS=/tmp/dagsim_cuda_libs
mkdir -p $LIBS
# (never the toolkit's stubs/, which load but fail every call)
SEARCH="$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib"
for lib in cublas cublasLt nvrtc nccl; do
  f=$(find -L $SEARCH -name "lib$lib.so*" 2>/dev/null | grep -v -e stubs -e alt -e builtins | head -1)
  if [ -n "$f" ]; then ln -sf "$f" $LIBS/lib$lib.so; ln -sf "$f" $LIBS/lib$lib.so.12; echo "lib$lib -> $f"; else echo "lib$lib: not found"; fi
done
export LD_LIBRARY_PATH=$LIBS:${LD_LIBRARY_PATH:-}
