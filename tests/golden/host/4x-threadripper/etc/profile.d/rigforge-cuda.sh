# managed by rigforge, profile 4x-threadripper — do not edit
# CUDA 13.2 toolkit for login shells (nvcc and friends on PATH).
case ":$PATH:" in
  *":/usr/local/cuda-13.2/bin:"*) ;;
  *) PATH="/usr/local/cuda-13.2/bin:$PATH" ;;
esac
export PATH
export CUDA_HOME="/usr/local/cuda-13.2"
