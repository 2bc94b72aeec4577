; A small vision transformer for scikit-learn's digits, made and trained by examples/make_digits_vit.py.
(input image f32 (shape 1 1 8 8))
(weight b0_fc1_b f32 (shape 64) "digits_vit.npz")
(weight b0_fc1_w f32 (shape 64 32) "digits_vit.npz")
(weight b0_fc2_b f32 (shape 32) "digits_vit.npz")
(weight b0_fc2_w f32 (shape 32 64) "digits_vit.npz")
(weight b0_k_b f32 (shape 32) "digits_vit.npz")
(weight b0_k_w f32 (shape 32 32) "digits_vit.npz")
(weight b0_ln1_scale f32 (shape 32) "digits_vit.npz")
(weight b0_ln1_shift f32 (shape 32) "digits_vit.npz")
(weight b0_ln2_scale f32 (shape 32) "digits_vit.npz")
(weight b0_ln2_shift f32 (shape 32) "digits_vit.npz")
(weight b0_out_b f32 (shape 32) "digits_vit.npz")
(weight b0_out_w f32 (shape 32 32) "digits_vit.npz")
(weight b0_q_b f32 (shape 32) "digits_vit.npz")
(weight b0_q_w f32 (shape 32 32) "digits_vit.npz")
(weight b0_v_b f32 (shape 32) "digits_vit.npz")
(weight b0_v_w f32 (shape 32 32) "digits_vit.npz")
(weight b1_fc1_b f32 (shape 64) "digits_vit.npz")
(weight b1_fc1_w f32 (shape 64 32) "digits_vit.npz")
(weight b1_fc2_b f32 (shape 32) "digits_vit.npz")
(weight b1_fc2_w f32 (shape 32 64) "digits_vit.npz")
(weight b1_k_b f32 (shape 32) "digits_vit.npz")
(weight b1_k_w f32 (shape 32 32) "digits_vit.npz")
(weight b1_ln1_scale f32 (shape 32) "digits_vit.npz")
(weight b1_ln1_shift f32 (shape 32) "digits_vit.npz")
(weight b1_ln2_scale f32 (shape 32) "digits_vit.npz")
(weight b1_ln2_shift f32 (shape 32) "digits_vit.npz")
(weight b1_out_b f32 (shape 32) "digits_vit.npz")
(weight b1_out_w f32 (shape 32 32) "digits_vit.npz")
(weight b1_q_b f32 (shape 32) "digits_vit.npz")
(weight b1_q_w f32 (shape 32 32) "digits_vit.npz")
(weight b1_v_b f32 (shape 32) "digits_vit.npz")
(weight b1_v_w f32 (shape 32 32) "digits_vit.npz")
(weight embed_b f32 (shape 32) "digits_vit.npz")
(weight embed_w f32 (shape 32 16) "digits_vit.npz")
(weight final_ln_scale f32 (shape 32) "digits_vit.npz")
(weight final_ln_shift f32 (shape 32) "digits_vit.npz")
(weight head_b f32 (shape 10) "digits_vit.npz")
(weight head_w f32 (shape 10 128) "digits_vit.npz")
(weight position f32 (shape 1 4 32) "digits_vit.npz")

(let patches
 (access-reshape
  (access-transpose
   (access-reshape (access-tensor image) (access-shape (shape 1 2 4 2 4) (shape)))
   (list 0 1 3 2 4))
  (access-shape (shape 1 4 16) (shape))))
(let embed
 (compute elementwise-add
  (access-pair
   (access-reshape
    (compute dot-product
     (access-cartesian-product
      (access (access-reshape patches (access-shape (shape 4 16) (shape))) 1)
      (access (access-tensor embed_w) 1)))
    (access-shape (shape 1 4 32) (shape)))
   (access-broadcast
    (access-reshape (access-tensor embed_b) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let tokens (compute elementwise-add (access-pair embed (access-tensor position))))
(let elementwise_sub_1
 (compute elementwise-sub
  (access-pair
   tokens
   (access-broadcast
    (access-reshape
     (compute reduce-mean (access tokens 2))
     (access-shape (shape 1 4 1) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let access_broadcast_2
 (access-broadcast
  (access-reshape (access-literal (literal 1e-05)) (access-shape (shape 1 1 1) (shape)))
  (access-shape (shape 1 4 1) (shape))))
(let b0_ln1
 (compute elementwise-add
  (access-pair
   (compute elementwise-mul
    (access-pair
     (compute elementwise-div
      (access-pair
       elementwise_sub_1
       (access-broadcast
        (compute sqrt
         (compute elementwise-add
          (access-pair
           (access-reshape
            (compute reduce-mean
             (access
              (compute elementwise-mul (access-pair elementwise_sub_1 elementwise_sub_1))
              2))
            (access-shape (shape 1 4 1) (shape)))
           access_broadcast_2)))
        (access-shape (shape 1 4 32) (shape)))))
     (access-broadcast
      (access-reshape (access-tensor b0_ln1_scale) (access-shape (shape 1 1 32) (shape)))
      (access-shape (shape 1 4 32) (shape)))))
   (access-broadcast
    (access-reshape (access-tensor b0_ln1_shift) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let access_3 (access (access-reshape b0_ln1 (access-shape (shape 4 32) (shape))) 1))
(let b0_q
 (compute elementwise-add
  (access-pair
   (access-reshape
    (compute dot-product
     (access-cartesian-product access_3 (access (access-tensor b0_q_w) 1)))
    (access-shape (shape 1 4 32) (shape)))
   (access-broadcast
    (access-reshape (access-tensor b0_q_b) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let access_reshape_4
 (access-reshape
  (access-transpose
   (access-reshape b0_q (access-shape (shape 1 4 2 16) (shape)))
   (list 0 2 1 3))
  (access-shape (shape 2 4 16) (shape))))
(let b0_k
 (compute elementwise-add
  (access-pair
   (access-reshape
    (compute dot-product
     (access-cartesian-product access_3 (access (access-tensor b0_k_w) 1)))
    (access-shape (shape 1 4 32) (shape)))
   (access-broadcast
    (access-reshape (access-tensor b0_k_b) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let access_reshape_5
 (access-reshape
  (access-transpose
   (access-reshape b0_k (access-shape (shape 1 4 2 16) (shape)))
   (list 0 2 3 1))
  (access-shape (shape 2 16 4) (shape))))
(let access_broadcast_6
 (access-broadcast
  (access-reshape (access-literal (literal 0.25)) (access-shape (shape 1 1 1 1) (shape)))
  (access-shape (shape 1 2 4 4) (shape))))
(let access_reshape_7
 (access-reshape
  (access
   (compute softmax
    (access
     (compute elementwise-mul
      (access-pair
       (access-reshape
        (access-concatenate
         (access-reshape
          (compute dot-product
           (access-cartesian-product
            (access
             (access-reshape
              (access-slice access_reshape_4 0 0 1)
              (access-shape (shape 4 16) (shape)))
             1)
            (access
             (access-transpose
              (access-reshape
               (access-slice access_reshape_5 0 0 1)
               (access-shape (shape 16 4) (shape)))
              (list 1 0))
             1)))
          (access-shape (shape 1 4 4) (shape)))
         (access-reshape
          (compute dot-product
           (access-cartesian-product
            (access
             (access-reshape
              (access-slice access_reshape_4 0 1 2)
              (access-shape (shape 4 16) (shape)))
             1)
            (access
             (access-transpose
              (access-reshape
               (access-slice access_reshape_5 0 1 2)
               (access-shape (shape 16 4) (shape)))
              (list 1 0))
             1)))
          (access-shape (shape 1 4 4) (shape)))
         0)
        (access-shape (shape 1 2 4 4) (shape)))
       access_broadcast_6))
     3))
   4)
  (access-shape (shape 2 4 4) (shape))))
(let b0_v
 (compute elementwise-add
  (access-pair
   (access-reshape
    (compute dot-product
     (access-cartesian-product access_3 (access (access-tensor b0_v_w) 1)))
    (access-shape (shape 1 4 32) (shape)))
   (access-broadcast
    (access-reshape (access-tensor b0_v_b) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let access_reshape_8
 (access-reshape
  (access-transpose
   (access-reshape b0_v (access-shape (shape 1 4 2 16) (shape)))
   (list 0 2 1 3))
  (access-shape (shape 2 4 16) (shape))))
(let b0_attn
 (access-reshape
  (access-transpose
   (access-reshape
    (access-concatenate
     (access-reshape
      (compute dot-product
       (access-cartesian-product
        (access
         (access-reshape
          (access-slice access_reshape_7 0 0 1)
          (access-shape (shape 4 4) (shape)))
         1)
        (access
         (access-transpose
          (access-reshape
           (access-slice access_reshape_8 0 0 1)
           (access-shape (shape 4 16) (shape)))
          (list 1 0))
         1)))
      (access-shape (shape 1 4 16) (shape)))
     (access-reshape
      (compute dot-product
       (access-cartesian-product
        (access
         (access-reshape
          (access-slice access_reshape_7 0 1 2)
          (access-shape (shape 4 4) (shape)))
         1)
        (access
         (access-transpose
          (access-reshape
           (access-slice access_reshape_8 0 1 2)
           (access-shape (shape 4 16) (shape)))
          (list 1 0))
         1)))
      (access-shape (shape 1 4 16) (shape)))
     0)
    (access-shape (shape 1 2 4 16) (shape)))
   (list 0 2 1 3))
  (access-shape (shape 1 4 32) (shape))))
(let b0_out
 (compute elementwise-add
  (access-pair
   (access-reshape
    (compute dot-product
     (access-cartesian-product
      (access (access-reshape b0_attn (access-shape (shape 4 32) (shape))) 1)
      (access (access-tensor b0_out_w) 1)))
    (access-shape (shape 1 4 32) (shape)))
   (access-broadcast
    (access-reshape (access-tensor b0_out_b) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let b0_res1 (compute elementwise-add (access-pair tokens b0_out)))
(let elementwise_sub_10
 (compute elementwise-sub
  (access-pair
   b0_res1
   (access-broadcast
    (access-reshape
     (compute reduce-mean (access b0_res1 2))
     (access-shape (shape 1 4 1) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let b0_ln2
 (compute elementwise-add
  (access-pair
   (compute elementwise-mul
    (access-pair
     (compute elementwise-div
      (access-pair
       elementwise_sub_10
       (access-broadcast
        (compute sqrt
         (compute elementwise-add
          (access-pair
           (access-reshape
            (compute reduce-mean
             (access
              (compute elementwise-mul
               (access-pair elementwise_sub_10 elementwise_sub_10))
              2))
            (access-shape (shape 1 4 1) (shape)))
           access_broadcast_2)))
        (access-shape (shape 1 4 32) (shape)))))
     (access-broadcast
      (access-reshape (access-tensor b0_ln2_scale) (access-shape (shape 1 1 32) (shape)))
      (access-shape (shape 1 4 32) (shape)))))
   (access-broadcast
    (access-reshape (access-tensor b0_ln2_shift) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let b0_fc1
 (compute relu
  (compute elementwise-add
   (access-pair
    (access-reshape
     (compute dot-product
      (access-cartesian-product
       (access (access-reshape b0_ln2 (access-shape (shape 4 32) (shape))) 1)
       (access (access-tensor b0_fc1_w) 1)))
     (access-shape (shape 1 4 64) (shape)))
    (access-broadcast
     (access-reshape (access-tensor b0_fc1_b) (access-shape (shape 1 1 64) (shape)))
     (access-shape (shape 1 4 64) (shape)))))))
(let b0_fc2
 (compute elementwise-add
  (access-pair
   (access-reshape
    (compute dot-product
     (access-cartesian-product
      (access (access-reshape b0_fc1 (access-shape (shape 4 64) (shape))) 1)
      (access (access-tensor b0_fc2_w) 1)))
    (access-shape (shape 1 4 32) (shape)))
   (access-broadcast
    (access-reshape (access-tensor b0_fc2_b) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let b0_res2 (compute elementwise-add (access-pair b0_res1 b0_fc2)))
(let elementwise_sub_12
 (compute elementwise-sub
  (access-pair
   b0_res2
   (access-broadcast
    (access-reshape
     (compute reduce-mean (access b0_res2 2))
     (access-shape (shape 1 4 1) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let b1_ln1
 (compute elementwise-add
  (access-pair
   (compute elementwise-mul
    (access-pair
     (compute elementwise-div
      (access-pair
       elementwise_sub_12
       (access-broadcast
        (compute sqrt
         (compute elementwise-add
          (access-pair
           (access-reshape
            (compute reduce-mean
             (access
              (compute elementwise-mul
               (access-pair elementwise_sub_12 elementwise_sub_12))
              2))
            (access-shape (shape 1 4 1) (shape)))
           access_broadcast_2)))
        (access-shape (shape 1 4 32) (shape)))))
     (access-broadcast
      (access-reshape (access-tensor b1_ln1_scale) (access-shape (shape 1 1 32) (shape)))
      (access-shape (shape 1 4 32) (shape)))))
   (access-broadcast
    (access-reshape (access-tensor b1_ln1_shift) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let access_13 (access (access-reshape b1_ln1 (access-shape (shape 4 32) (shape))) 1))
(let b1_q
 (compute elementwise-add
  (access-pair
   (access-reshape
    (compute dot-product
     (access-cartesian-product access_13 (access (access-tensor b1_q_w) 1)))
    (access-shape (shape 1 4 32) (shape)))
   (access-broadcast
    (access-reshape (access-tensor b1_q_b) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let access_reshape_14
 (access-reshape
  (access-transpose
   (access-reshape b1_q (access-shape (shape 1 4 2 16) (shape)))
   (list 0 2 1 3))
  (access-shape (shape 2 4 16) (shape))))
(let b1_k
 (compute elementwise-add
  (access-pair
   (access-reshape
    (compute dot-product
     (access-cartesian-product access_13 (access (access-tensor b1_k_w) 1)))
    (access-shape (shape 1 4 32) (shape)))
   (access-broadcast
    (access-reshape (access-tensor b1_k_b) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let access_reshape_15
 (access-reshape
  (access-transpose
   (access-reshape b1_k (access-shape (shape 1 4 2 16) (shape)))
   (list 0 2 3 1))
  (access-shape (shape 2 16 4) (shape))))
(let access_reshape_16
 (access-reshape
  (access
   (compute softmax
    (access
     (compute elementwise-mul
      (access-pair
       (access-reshape
        (access-concatenate
         (access-reshape
          (compute dot-product
           (access-cartesian-product
            (access
             (access-reshape
              (access-slice access_reshape_14 0 0 1)
              (access-shape (shape 4 16) (shape)))
             1)
            (access
             (access-transpose
              (access-reshape
               (access-slice access_reshape_15 0 0 1)
               (access-shape (shape 16 4) (shape)))
              (list 1 0))
             1)))
          (access-shape (shape 1 4 4) (shape)))
         (access-reshape
          (compute dot-product
           (access-cartesian-product
            (access
             (access-reshape
              (access-slice access_reshape_14 0 1 2)
              (access-shape (shape 4 16) (shape)))
             1)
            (access
             (access-transpose
              (access-reshape
               (access-slice access_reshape_15 0 1 2)
               (access-shape (shape 16 4) (shape)))
              (list 1 0))
             1)))
          (access-shape (shape 1 4 4) (shape)))
         0)
        (access-shape (shape 1 2 4 4) (shape)))
       access_broadcast_6))
     3))
   4)
  (access-shape (shape 2 4 4) (shape))))
(let b1_v
 (compute elementwise-add
  (access-pair
   (access-reshape
    (compute dot-product
     (access-cartesian-product access_13 (access (access-tensor b1_v_w) 1)))
    (access-shape (shape 1 4 32) (shape)))
   (access-broadcast
    (access-reshape (access-tensor b1_v_b) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let access_reshape_17
 (access-reshape
  (access-transpose
   (access-reshape b1_v (access-shape (shape 1 4 2 16) (shape)))
   (list 0 2 1 3))
  (access-shape (shape 2 4 16) (shape))))
(let b1_attn
 (access-reshape
  (access-transpose
   (access-reshape
    (access-concatenate
     (access-reshape
      (compute dot-product
       (access-cartesian-product
        (access
         (access-reshape
          (access-slice access_reshape_16 0 0 1)
          (access-shape (shape 4 4) (shape)))
         1)
        (access
         (access-transpose
          (access-reshape
           (access-slice access_reshape_17 0 0 1)
           (access-shape (shape 4 16) (shape)))
          (list 1 0))
         1)))
      (access-shape (shape 1 4 16) (shape)))
     (access-reshape
      (compute dot-product
       (access-cartesian-product
        (access
         (access-reshape
          (access-slice access_reshape_16 0 1 2)
          (access-shape (shape 4 4) (shape)))
         1)
        (access
         (access-transpose
          (access-reshape
           (access-slice access_reshape_17 0 1 2)
           (access-shape (shape 4 16) (shape)))
          (list 1 0))
         1)))
      (access-shape (shape 1 4 16) (shape)))
     0)
    (access-shape (shape 1 2 4 16) (shape)))
   (list 0 2 1 3))
  (access-shape (shape 1 4 32) (shape))))
(let b1_out
 (compute elementwise-add
  (access-pair
   (access-reshape
    (compute dot-product
     (access-cartesian-product
      (access (access-reshape b1_attn (access-shape (shape 4 32) (shape))) 1)
      (access (access-tensor b1_out_w) 1)))
    (access-shape (shape 1 4 32) (shape)))
   (access-broadcast
    (access-reshape (access-tensor b1_out_b) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let b1_res1 (compute elementwise-add (access-pair b0_res2 b1_out)))
(let elementwise_sub_19
 (compute elementwise-sub
  (access-pair
   b1_res1
   (access-broadcast
    (access-reshape
     (compute reduce-mean (access b1_res1 2))
     (access-shape (shape 1 4 1) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let b1_ln2
 (compute elementwise-add
  (access-pair
   (compute elementwise-mul
    (access-pair
     (compute elementwise-div
      (access-pair
       elementwise_sub_19
       (access-broadcast
        (compute sqrt
         (compute elementwise-add
          (access-pair
           (access-reshape
            (compute reduce-mean
             (access
              (compute elementwise-mul
               (access-pair elementwise_sub_19 elementwise_sub_19))
              2))
            (access-shape (shape 1 4 1) (shape)))
           access_broadcast_2)))
        (access-shape (shape 1 4 32) (shape)))))
     (access-broadcast
      (access-reshape (access-tensor b1_ln2_scale) (access-shape (shape 1 1 32) (shape)))
      (access-shape (shape 1 4 32) (shape)))))
   (access-broadcast
    (access-reshape (access-tensor b1_ln2_shift) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let b1_fc1
 (compute relu
  (compute elementwise-add
   (access-pair
    (access-reshape
     (compute dot-product
      (access-cartesian-product
       (access (access-reshape b1_ln2 (access-shape (shape 4 32) (shape))) 1)
       (access (access-tensor b1_fc1_w) 1)))
     (access-shape (shape 1 4 64) (shape)))
    (access-broadcast
     (access-reshape (access-tensor b1_fc1_b) (access-shape (shape 1 1 64) (shape)))
     (access-shape (shape 1 4 64) (shape)))))))
(let b1_fc2
 (compute elementwise-add
  (access-pair
   (access-reshape
    (compute dot-product
     (access-cartesian-product
      (access (access-reshape b1_fc1 (access-shape (shape 4 64) (shape))) 1)
      (access (access-tensor b1_fc2_w) 1)))
    (access-shape (shape 1 4 32) (shape)))
   (access-broadcast
    (access-reshape (access-tensor b1_fc2_b) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let b1_res2 (compute elementwise-add (access-pair b1_res1 b1_fc2)))
(let elementwise_sub_21
 (compute elementwise-sub
  (access-pair
   b1_res2
   (access-broadcast
    (access-reshape
     (compute reduce-mean (access b1_res2 2))
     (access-shape (shape 1 4 1) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let final_ln
 (compute elementwise-add
  (access-pair
   (compute elementwise-mul
    (access-pair
     (compute elementwise-div
      (access-pair
       elementwise_sub_21
       (access-broadcast
        (compute sqrt
         (compute elementwise-add
          (access-pair
           (access-reshape
            (compute reduce-mean
             (access
              (compute elementwise-mul
               (access-pair elementwise_sub_21 elementwise_sub_21))
              2))
            (access-shape (shape 1 4 1) (shape)))
           access_broadcast_2)))
        (access-shape (shape 1 4 32) (shape)))))
     (access-broadcast
      (access-reshape
       (access-tensor final_ln_scale)
       (access-shape (shape 1 1 32) (shape)))
      (access-shape (shape 1 4 32) (shape)))))
   (access-broadcast
    (access-reshape (access-tensor final_ln_shift) (access-shape (shape 1 1 32) (shape)))
    (access-shape (shape 1 4 32) (shape))))))
(let flat (access-reshape final_ln (access-shape (shape 1 128) (shape))))
(let head
 (compute dot-product
  (access-cartesian-product (access flat 1) (access (access-tensor head_w) 1))))
(let logits
 (compute elementwise-add
  (access-pair
   head
   (access-broadcast
    (access-reshape (access-tensor head_b) (access-shape (shape 1 10) (shape)))
    (access-shape (shape 1 10) (shape))))))

logits
