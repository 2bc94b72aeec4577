; A ResNet-style basic block in int8 (NCHW, 16 channels, 16x16):
;   conv 3x3 pad 1 + bias -> requantize -> relu -> conv 3x3 pad 1 + bias,
;   plus the skip connection (x widened to i32 and scaled by 32, the accumulator's scale),
;   -> requantize -> relu.  Weights: resnet_block.npz (examples/make_resnet_block.py).
(input x i8 (shape 1 16 16 16))
(weight conv1_w i8 (shape 16 16 3 3) "resnet_block.npz")
(weight conv1_b i32 (shape 16) "resnet_block.npz")
(weight conv2_w i8 (shape 16 16 3 3) "resnet_block.npz")
(weight conv2_b i32 (shape 16) "resnet_block.npz")

; conv1: ((1,16,16,16),()) i32, written as the original Glenside writes a conv2d
(let conv1
 (access-transpose
  (compute dot-product
   (access-cartesian-product
    (access (access-tensor conv1_w) 1)
    (access
     (access-squeeze
      (access-windows
       (access (access-pad (access-pad (access-tensor x) zero-padding 2 1 1) zero-padding 3 1 1) 1)
       (shape 16 3 3)
       (shape 1 1 1))
      1)
     3)))
  (list 1 0 2 3)))

(let conv1_biased
 (compute elementwise-add
  (access-pair
   conv1
   (access-broadcast
    (access-insert-axis (access-insert-axis (access-insert-axis (access-tensor conv1_b) 0) 2) 3)
    (access-shape (shape 1 16 16 16) (shape))))))

; i32 -> i8: (x + 16) >> 5, saturated; then relu
(let hidden (compute relu (compute (requantize 1 0 5 0) conv1_biased)))

(let conv2
 (access-transpose
  (compute dot-product
   (access-cartesian-product
    (access (access-tensor conv2_w) 1)
    (access
     (access-squeeze
      (access-windows
       (access (access-pad (access-pad hidden zero-padding 2 1 1) zero-padding 3 1 1) 1)
       (shape 16 3 3)
       (shape 1 1 1))
      1)
     3)))
  (list 1 0 2 3)))

(let conv2_biased
 (compute elementwise-add
  (access-pair
   conv2
   (access-broadcast
    (access-insert-axis (access-insert-axis (access-insert-axis (access-tensor conv2_b) 0) 2) 3)
    (access-shape (shape 1 16 16 16) (shape))))))

; the skip connection: x as i32, times 32 (a literal broadcast over the whole tensor)
(let skip
 (compute elementwise-mul
  (access-pair
   (compute (cast i32) (access-tensor x))
   (access-broadcast
    (access-insert-axis
     (access-insert-axis
      (access-insert-axis (access-insert-axis (access-literal (literal 32 i32)) 0) 0) 0) 0)
    (access-shape (shape 1 16 16 16) (shape))))))

(let block_sum (compute elementwise-add (access-pair conv2_biased skip)))

(compute relu (compute (requantize 1 0 5 0) block_sum))
