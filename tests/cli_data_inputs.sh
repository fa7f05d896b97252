#!/usr/bin/env bash
# cli_data_inputs.sh — bad inputs of the .npy and image-folder datasets and of
# `mixprec eval`, in the manner of cli_bad_inputs.sh: each row asserts the
# exit status, exactly one stderr line matching the row's pattern (naming
# the file, option or tensor), no sanitizer report and no hang. The bad
# files are made here (python3, standard library).
set -u
export LC_ALL=C
bin=$(realpath "$1")
work=${MP_WORK:-/tmp/mp_cli_test}/data_inputs
rm -rf "$work" && mkdir -p "$work/in" "$work/c"
in=$work/in
pass=0 fail=0

python3 - "$in" <<'PY' || { echo "FAIL: making the bad files"; exit 1; }
import os, struct, sys, zlib
d = sys.argv[1]
def npy(name, descr, shape, body, fortran=False, major=1):
    h = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)
    pre = 10 if major == 1 else 12
    h += " " * (-(pre + len(h) + 1) % 64) + "\n"
    ln = struct.pack("<H", len(h)) if major == 1 else struct.pack("<I", len(h))
    open(os.path.join(d, name), "wb").write(b"\x93NUMPY" + bytes([major, 0]) + ln + h.encode() + body)
npy("x10.npy", "|u1", "(10, 4, 4)", bytes(range(160)))
npy("y10.npy", "<i8", "(10,)", struct.pack("<10q", *[i % 3 for i in range(10)]))
npy("y9.npy", "<i8", "(9,)", struct.pack("<9q", *[0] * 9))
npy("x20.npy", "|u1", "(20, 4, 4)", bytes(range(160)) * 2)
npy("y20.npy", "<i8", "(20,)", struct.pack("<20q", *[0] * 10 + [1] * 10))
npy("x40.npy", "|u1", "(40, 4, 4)", bytes((i * 7) % 251 for i in range(640)))
npy("y40_4.npy", "<i8", "(40,)", struct.pack("<40q", *[i % 4 for i in range(40)]))  # 4 classes
npy("y40_2.npy", "<i8", "(40,)", struct.pack("<40q", *[i % 2 for i in range(40)]))  # the first 2 of them
npy("yneg.npy", "<i4", "(10,)", struct.pack("<10i", *([0] * 9 + [-2])))
npy("xf8.npy", "<f8", "(10, 4, 4)", bytes(8 * 160))
npy("xfortran.npy", "|u1", "(10, 4, 4)", bytes(160), fortran=True)
npy("xtrunc.npy", "|u1", "(10, 4, 4)", bytes(100))
npy("xbig.npy", ">f4", "(10, 4, 4)", bytes(640))
open(os.path.join(d, "xzip.npy"), "wb").write(b"PK\x03\x04" + bytes(60))
def png(path, w, h, rows):
    raw = b"".join(b"\x00" + r for r in rows)
    chunk = lambda t, b: struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) \
        + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").write(data)
for k in range(2):
    for i in range(6):
        png(os.path.join(d, "f", "c%d" % k, "%02d.png" % (6 * k + i)), 6, 6, [bytes([(i * 40 + y) % 256] * 6) for y in range(6)])
os.makedirs(os.path.join(d, "f_corrupt"), exist_ok=True)
os.system("cp -r %s/f/c0 %s/f/c1 %s/f_corrupt/" % (d, d, d))
open(os.path.join(d, "f_corrupt", "c1", "99.jpg"), "wb").write(b"\xff\xd8\xff\xe0" + bytes(40) + b"garbage")
b = open(os.path.join(d, "f", "c0", "00.png"), "rb").read()
os.makedirs(os.path.join(d, "f_trunc"), exist_ok=True)
os.system("cp -r %s/f/c0 %s/f/c1 %s/f_trunc/" % (d, d, d))
open(os.path.join(d, "f_trunc", "c0", "03.png"), "wb").write(b[:len(b) - 20])
for name in ("f_dclass", "f_dimg"):  # dangling symbolic links: a class folder, an image
    os.makedirs(os.path.join(d, name), exist_ok=True)
    os.system("cp -r %s/f/c0 %s/f/c1 %s/%s/" % (d, d, d, name))
os.symlink(os.path.join(d, "none"), os.path.join(d, "f_dclass", "c0b"))  # between c0 and c1: would shift c1
os.symlink(os.path.join(d, "none.png"), os.path.join(d, "f_dimg", "c1", "50.png"))
for k in range(2):  # train/ and test/ whose test images' data do not decode
    for i in range(2):
        png(os.path.join(d, "f_split", "train", "c%d" % k, "%d.png" % i), 6, 6, [bytes([(i * 40 + y) % 256] * 6) for y in range(6)])
    os.makedirs(os.path.join(d, "f_split", "test", "c%d" % k), exist_ok=True)
    open(os.path.join(d, "f_split", "test", "c%d" % k, "t.png"), "wb").write(b[:len(b) - 20])
for k in range(2):  # images beside files that are none: counted and named, not used unsaid
    for i in range(3):
        png(os.path.join(d, "f_other", "c%d" % k, "%d.png" % i), 6, 6, [bytes([(i * 40 + y) % 256] * 6) for y in range(6)])
open(os.path.join(d, "f_other", "c0", "x.bmp"), "wb").write(b"BM" + bytes(60))
open(os.path.join(d, "f_other", "c1", "notes.txt"), "w").write("not an image")
open(os.path.join(d, "f_other", "c1", "a.webp"), "wb").write(b"RIFF" + bytes(20))
for part in ("train", "test"):  # train/ and test/: each part counts its own
    for k in range(2):
        for i in range(2):
            png(os.path.join(d, "f_parts", part, "c%d" % k, "%d.png" % i), 6, 6, [bytes([(i * 40 + y) % 256] * 6) for y in range(6)])
open(os.path.join(d, "f_parts", "test", "c1", "z.bmp"), "wb").write(b"BM" + bytes(60))
os.makedirs(os.path.join(d, "empty"), exist_ok=True)
os.makedirs(os.path.join(d, "noimg", "a"), exist_ok=True)
open(os.path.join(d, "noimg", "a", "x.txt"), "w").write("x")
png(os.path.join(d, "sizes", "a", "0.png"), 6, 6, [bytes(6)] * 6)
png(os.path.join(d, "sizes", "a", "2.png"), 6, 6, [bytes(6)] * 6)  # a class of two: 0.5 holds one out
png(os.path.join(d, "sizes", "b", "1.png"), 5, 6, [bytes(5)] * 6)
open(os.path.join(d, "garbage.safetensors"), "wb").write(b"not a checkpoint")
PY

# a real checkpoint: the small model on 1x8x8 synthetic data
syn=(--data synthetic --synthetic-size 100 --synthetic-shape 1x8x8 --batch 10)
ck=$in/syn.safetensors
"$bin" train "${syn[@]}" --epochs 1 --quiet --save "$ck" 2>"$in/ck.err" || { echo "FAIL: checkpoint: $(cat "$in/ck.err")"; exit 1; }
# copies of it whose metadata names a model and a precision that do not exist
python3 - "$ck" <<'PY' || { echo "FAIL: editing the checkpoint's metadata"; exit 1; }
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
for key, value, name in (("mixprec.model", "resnet999", "model999"), ("mixprec.precision", "fp8", "fp8")):
    head = json.loads(b[8:8 + n])
    head["__metadata__"][key] = value
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    open(sys.argv[1].replace("syn.", name + "."), "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
PY
# checkpoints of a 4-class and a 2-class run on the same images
for k in 4 2; do
  "$bin" train --data "npy:$in/x40.npy,$in/y40_$k.npy" --batch 4 --epochs 1 --max-steps 2 --quiet \
    --save "$in/c$k.safetensors" 2>"$in/c$k.err" || { echo "FAIL: checkpoint c$k: $(cat "$in/c$k.err")"; exit 1; }
done

row() {
  local id=$1 want=$2 pattern=$3; shift 4
  local dir=$work/c/$id rc why=""
  mkdir -p "$dir"
  (cd "$dir" && timeout -k 5 120 "$bin" "$@" >"$dir/out" 2>"$dir/err"); rc=$?
  local lines; lines=$(wc -l <"$dir/err")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="hung"
  elif [ "$rc" -eq 0 ]; then why="exit 0"
  elif [ "$want" != "!" ] && [ "$rc" -ne "$want" ]; then why="exit $rc, want $want"
  elif grep -qE "Sanitizer|runtime error:|internal assertion" "$dir/err"; then why="sanitizer report or assertion"
  elif [ "$lines" -ne 1 ]; then why="$lines stderr lines, want 1"
  elif ! grep -qE -- "$pattern" "$dir/err"; then why="message does not match /$pattern/"
  fi
  if [ -z "$why" ]; then pass=$((pass + 1))
  else fail=$((fail + 1)); echo "FAIL: $id: mixprec $* -> $why; stderr: $(head -c 600 "$dir/err")"; fi
}
np() { echo "npy:$in/$1,$in/$2"; }
t=(train --epochs 1 --batch 2 --quiet)

# ---- .npy ------------------------------------------------------------------------
row npy_count 1 "count mismatch: $in/x10.npy has 10 images but $in/y9.npy has 9 labels" -- "${t[@]}" --data "$(np x10.npy y9.npy)"
row npy_label_neg 1 "$in/yneg.npy: label -2 of sample 9 is out of range" -- "${t[@]}" --data "$(np x10.npy yneg.npy)"
row npy_f8 1 "$in/xf8.npy: images of dtype float64 are not supported" -- "${t[@]}" --data "$(np xf8.npy y10.npy)"
row npy_fortran 1 "$in/xfortran.npy: fortran_order is True" -- "${t[@]}" --data "$(np xfortran.npy y10.npy)"
row npy_trunc 1 "$in/xtrunc.npy: truncated: the header declares 160 bytes of data, the file holds 100" -- "${t[@]}" --data "$(np xtrunc.npy y10.npy)"
row npy_big_endian 1 "$in/xbig.npy: dtype '>f4' is big-endian" -- "${t[@]}" --data "$(np xbig.npy y10.npy)"
row npy_magic 1 "$in/xzip.npy: bad magic" -- "${t[@]}" --data "$(np xzip.npy y10.npy)"
row npy_missing 1 "$in/none.npy: not found" -- "${t[@]}" --data "$(np none.npy y10.npy)"
row npy_three 1 "expected npy:IMAGES.npy,LABELS.npy or" -- "${t[@]}" --data "npy:$in/x10.npy,$in/y10.npy,$in/x10.npy"
row npy_layout 2 "--npy-layout 'chw' must be auto, nchw or nhwc" -- "${t[@]}" --npy-layout chw
row val_fraction_one 2 "--val-fraction 1 must lie strictly between 0 and 1" -- "${t[@]}" --val-fraction 1
row val_fraction_tiny 1 "--val-fraction 0.01 of 10 samples leaves 10 for training and 0 held out" -- "${t[@]}" --data "$(np x10.npy y10.npy)" --val-fraction 0.01

# ---- image folders -----------------------------------------------------------------
row folder_missing 1 "$in/none: not found" -- "${t[@]}" --data "folder:$in/none"
row folder_empty 1 "$in/empty: no class subfolders" -- "${t[@]}" --data "folder:$in/empty"
row folder_no_images 1 "$in/noimg: no images \(.jpg, .jpeg, .png\) in its 1 class subfolders" -- "${t[@]}" --data "folder:$in/noimg"
row folder_corrupt_jpeg 1 "$in/f_corrupt/c1/99.jpg: corrupt JPEG" -- "${t[@]}" --data "folder:$in/f_corrupt"
row folder_trunc_png 1 "$in/f_trunc/c0/03.png: corrupt PNG" -- "${t[@]}" --data "folder:$in/f_trunc"
row folder_trunc_lazy 1 "$in/f_trunc/c0/03.png: corrupt PNG" -- "${t[@]}" --data "folder:$in/f_trunc" --decode-memory-mb 0
row folder_sizes 1 "images differ in size .*give the sample size \(--image-size HxW\)" -- "${t[@]}" --data "folder:$in/sizes" --val-fraction 0.5
# a dangling symbolic link: a class folder is an error (dropped, it would shift the later classes' labels), an
# image a bad one (skip leaves it out)
dl="a symbolic link to a path that does not exist"
row folder_dangling_class 1 "$in/f_dclass/c0b: $dl$" -- "${t[@]}" --data "folder:$in/f_dclass"
row folder_dangling_class_skip 1 "$in/f_dclass/c0b: $dl$" -- "${t[@]}" --data "folder:$in/f_dclass" \
  --bad-images skip
row folder_dangling_image 1 "$in/f_dimg/c1/50.png: $dl \(--bad-images skip" -- "${t[@]}" --data "folder:$in/f_dimg"
row folder_not_dir 1 "$in/x10.npy: not a folder" -- "${t[@]}" --data "folder:$in/x10.npy"
row folder_none 1 "--data folder:DIR needs a folder" -- "${t[@]}" --data "folder:"
row bad_images_maybe 2 "--bad-images 'maybe' must be skip or fail" -- "${t[@]}" --bad-images maybe
row image_size_zero 2 "--image-size '0x5' must be HxW" -- "${t[@]}" --image-size 0x5
# sizes past INT_MAX wrapped (2^32 + 8 read as 8): refused, as are signs and text after the numbers
row image_size_wrap 2 "--image-size '4294967304x8' must be HxW" -- "${t[@]}" --image-size 4294967304x8
# the limits of --synthetic-size count its N/5 test samples, and are said in the user's numbers
row synthetic_size_limit 2 "^mixprec train: --synthetic-size 16777216 is out of range \[5, 13981014\]: with its N/5 test samples" -- \
  train --data synthetic --synthetic-size 16777216
row synthetic_size_values 1 "^mixprec train: --synthetic-size 300000 \(and 60000 test samples\) of --synthetic-shape 3x32x32: .*more than the limit" -- \
  train --data synthetic --synthetic-size 300000
row shape_wrap 2 "--synthetic-shape '4294967297x8x8' must be CxHxW" -- train "${syn[@]}" \
  --synthetic-shape 4294967297x8x8
row shape_huge 2 "--synthetic-shape '1x99999999999999999999x8' must be CxHxW" -- train "${syn[@]}" \
  --synthetic-shape 1x99999999999999999999x8
row shape_sign 2 "--synthetic-shape '1x\+8x8' must be CxHxW" -- train "${syn[@]}" --synthetic-shape 1x+8x8
row shape_tail 2 "--synthetic-shape '1x8x8x' must be CxHxW" -- train "${syn[@]}" --synthetic-shape 1x8x8x
row image_channels_2 2 "--image-channels 2: 1 \(gray\) or 3 \(RGB\)" -- "${t[@]}" --image-channels 2
row decode_threads_0 2 "--decode-threads 0 is out of range" -- "${t[@]}" --decode-threads 0
# an option of one kind of data given with another would be ignored: refused by name, before any data is read
row kind_npy_layout 2 "--npy-layout applies to --data npy:... only, not to --data synthetic" -- train "${syn[@]}" \
  --npy-layout nchw
row kind_image_size 2 "--image-size applies to --data folder:DIR only, not to --data npy:" -- "${t[@]}" \
  --data "$(np x10.npy y10.npy)" --image-size 8x8
row kind_decode_memory 2 "--decode-memory-mb applies to --data folder:DIR only, not to --data synthetic" -- \
  train "${syn[@]}" --decode-memory-mb 0
row kind_synthetic_shape 2 "--synthetic-shape applies to --data synthetic only, not to --data folder:" -- \
  "${t[@]}" --data "folder:$in/f_corrupt" --synthetic-shape 1x4x4
row kind_synthetic_size 2 "--synthetic-size applies to --data synthetic only, not to --data fashion-mnist" -- \
  "${t[@]}" --data fashion-mnist --synthetic-size 100
row kind_val_fraction 2 "--val-fraction applies to --data npy:X.npy,Y.npy \(two files\) and --data folder:DIR only, not to --data npy:" -- \
  "${t[@]}" --data "npy:$in/x10.npy,$in/y10.npy,$in/x10.npy,$in/y10.npy" --val-fraction 0.2
row kind_val_fraction_syn 2 "--val-fraction applies to .* not to --data synthetic" -- train "${syn[@]}" --val-fraction 0.2
row kind_data_dir 2 "--data-dir applies to --data fashion-mnist, mnist and cifar10 only, not to --data synthetic" -- \
  train "${syn[@]}" --data-dir "$in"
row kind_eval 2 "mixprec eval: --decode-threads applies to --data folder:DIR only" -- eval --data synthetic \
  --decode-threads 2 --checkpoint "$in/none.safetensors"
row kind_gan 2 "mixprec train-gan: --synthetic-size applies to --data synthetic only" -- train-gan \
  --data fashion-mnist --synthetic-size 100 --out "$work/c/kind_gan/out"
row kind_bench 2 "mixprec bench: --bad-images applies to --data folder:DIR only" -- bench --data synthetic --bad-images skip
row kind_doctor 2 "mixprec doctor: --npy-layout applies to --data npy:... only" -- doctor "${syn[@]}" --npy-layout nhwc
# ---- host memory -------------------------------------------------------------------
# a request larger than the host can give (MIXPREC_HOST_MEM_LIMIT lowers that figure) is one error naming what it
# was for, the bytes asked and those available, not an allocation that the kernel's OOM killer ends without a word
# (a folder whose decoded set does not fit twice is decoded per batch instead; here the model's first linear layer is
# what the host cannot give)
MIXPREC_HOST_MEM_LIMIT=16000000 row host_mem_folder 1 "^mixprec train: model small for 1x1024x1024 inputs: out of \
memory for parameter fc1\.weight \(268435456 floats and their gradient\): asked 2147483648 bytes \(2\.00 GiB\), \
16000000 bytes \(0\.01 GiB\) available \(MIXPREC_HOST_MEM_LIMIT\)$" -- \
  "${t[@]}" --data "folder:$in/f" --image-size 1024x1024
MIXPREC_HOST_MEM_LIMIT=1000 row host_mem_npy 1 "^mixprec train: out of memory for the 40 images of $in/x40.npy \
\(1x4x4 each, as float32\): asked 2560 bytes \(0\.00 GiB\), 1000 bytes" -- "${t[@]}" --data "$(np x40.npy y40_4.npy)"
MIXPREC_HOST_MEM_LIMIT=1000000 row host_mem_synthetic 1 "^mixprec train: --synthetic-size 1000 \(and 200 test \
samples\) of --synthetic-shape 3x32x32: out of memory for the synthetic dataset's 1200 samples of 3x32x32: asked \
14745600 bytes" -- train --data synthetic --synthetic-size 1000
MIXPREC_HOST_MEM_LIMIT=300000 row host_mem_arena 1 "^mixprec train: out of memory for the activations and \
gradients of batch 64 \(the plan's arena\): asked [0-9]+ bytes \([0-9.]+ GiB\), 300000 bytes \(0\.00 GiB\) available \
\(MIXPREC_HOST_MEM_LIMIT\); try a smaller batch$" -- train --device cpu --data synthetic \
  --synthetic-size 100 --synthetic-shape 1x8x8 --batch 64
# --val-fraction 0.35 of 20 (two classes of 10): 7 held out (as a float, 0.35 made it 6.9999998 and 6)
out=$("$bin" train --epochs 1 --batch 2 --data "npy:$in/x20.npy,$in/y20.npy" --val-fraction 0.35 2>&1)
grep -q ": 13 train / 7 test samples" <<<"$out" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: 0.35 of 20: $out"; }
# skip, decoded per batch: 03.png's header reads, its data does not: replaced by the next sample, said once
# (batch 1: no sample of the 11 is dropped at the epoch's end)
out=$("$bin" train --epochs 1 --batch 1 --data "folder:$in/f_trunc" --decode-memory-mb 0 --bad-images skip 2>&1)
grep -q "^input pipeline: 1 image of the epoch failed to decode and was replaced by the next samples" <<<"$out" \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: skip per batch: $out"; }
# ... and at 0.5 it is held out (03.png: c0's second of its three): left out of the test accuracy, said by
# train and by eval, whose count excludes it
d=$work/c/skip_eval && mkdir -p "$d"
out=$("$bin" train --epochs 1 --batch 1 --data "folder:$in/f_trunc" --decode-memory-mb 0 --bad-images skip \
  --val-fraction 0.5 --save "$d/ck.safetensors" 2>&1)
grep -q "^input pipeline: 1 test image failed to decode and was left out of the test accuracy" <<<"$out" \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: skip in the test part: $out"; }
out=$("$bin" eval --checkpoint "$d/ck.safetensors" --data "folder:$in/f_trunc" --decode-memory-mb 0 \
  --bad-images skip --val-fraction 0.5 2>&1)
grep -Eq "^eval: 5 samples \(1 undecodable image left out\), loss" <<<"$out" && pass=$((pass + 1)) \
  || { fail=$((fail + 1)); echo "FAIL: eval with an undecodable image: $out"; }
# ... and a test part none of whose images decode: an error, not accuracy 0 over 0 samples
row eval_none_decoded 1 "none of the 2 samples of .*f_split.* decoded \(2 left out as undecodable\)" -- eval \
  --checkpoint "$d/ck.safetensors" --data "folder:$in/f_split" --decode-memory-mb 0 --bad-images skip
# files in the class folders that are not images: trained without them, and the set-up line says how many,
# naming the first by path (c0/x.bmp before c1/a.webp and c1/notes.txt, whatever the folder's order)
out=$("$bin" train --epochs 1 --batch 2 --data "folder:$in/f_other" --val-fraction 0.34 2>&1)
grep -q "(train: 4 images, 2 classes, 3 files not .jpg/.jpeg/.png ignored (e.g. c0/x.bmp), decoded in memory): \
4 train / 2 test samples" <<<"$out" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: ignored files: $out"; }
# ... per part with train/ and test/: none in train/, one in test/, which eval's line counts too
d=$work/c/parts && mkdir -p "$d"
out=$("$bin" train --epochs 1 --batch 2 --data "folder:$in/f_parts" --save "$d/ck.safetensors" 2>&1)
grep -q "(train/: 4 images, 2 classes, decoded in memory): 4 train / 4 test samples" <<<"$out" \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: ignored files per part (train): $out"; }
out=$("$bin" eval --checkpoint "$d/ck.safetensors" --data "folder:$in/f_parts" 2>&1)
grep -Eq "^eval: 4 samples \(1 file not \.jpg/\.jpeg/\.png ignored\), loss" <<<"$out" && pass=$((pass + 1)) \
  || { fail=$((fail + 1)); echo "FAIL: ignored files per part (eval): $out"; }
out=$("$bin" eval --checkpoint "$d/ck.safetensors" --data "folder:$in/f_parts" --json 2>&1)
grep -q '"data":"[^"]*(test/: 4 images, 2 classes, 1 file not .jpg/.jpeg/.png ignored (e.g. test/c1/z.bmp), decoded' \
  <<<"$out" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: ignored files per part (eval --json): $out"; }
# skip: the bad images are left out and training runs
d=$work/c/skip && mkdir -p "$d"
if "$bin" "${t[@]}" --data "folder:$in/f_corrupt" --bad-images skip --val-fraction 0.25 >"$d/out" 2>"$d/err"; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: skip: $(cat "$d/err")"; fi

# ... and a dangling image link is one of the bad images, as f_corrupt's 99.jpg: 13 listed, 3 held out (the
# bad one among them, left out) -> 10 / 2, where a link dropped unsaid would leave 12 -> 9 / 3
out=$("$bin" train --epochs 1 --batch 2 --data "folder:$in/f_dimg" --bad-images skip --val-fraction 0.25 2>&1)
grep -q ": 10 train / 2 test samples" <<<"$out" && pass=$((pass + 1)) \
  || { fail=$((fail + 1)); echo "FAIL: skip a dangling image: $out"; }

# ---- eval ----------------------------------------------------------------------------
row eval_no_checkpoint 2 "--checkpoint FILE is required" -- eval
row eval_missing 1 "--checkpoint $in/none.safetensors: not found" -- eval --checkpoint "$in/none.safetensors"
row eval_garbage 1 "$in/garbage.safetensors: " -- eval --checkpoint "$in/garbage.safetensors"
row eval_train_option 2 "--lr is a training option" -- eval --checkpoint "$ck" --lr 0.1
row eval_unknown 2 "unknown option '--epochs'" -- eval --checkpoint "$ck" --epochs 2
row eval_model_other 1 "tensor '[a-z0-9_]+\.(weight|bias|running_mean|running_var)'.*\(the checkpoint was saved for model 'small', this model is 'cnn10'\)" -- eval --checkpoint "$ck" "${syn[@]}" --model cnn10
row eval_data_shape 1 "$ck: tensor 'fc[0-9]*\.weight' has shape" -- eval --checkpoint "$ck" --data synthetic --synthetic-shape 1x12x12
row eval_precision 2 "--precision 'fp8'|precision 'fp8'" -- eval --checkpoint "$ck" "${syn[@]}" --precision fp8
# a bad model or precision in the checkpoint's metadata is the file's, not an option the user gave
row eval_meta_model 1 "^mixprec eval: $in/model999.safetensors: metadata 'mixprec.model': unknown model 'resnet999'" -- \
  eval --checkpoint "$in/model999.safetensors" "${syn[@]}"
row eval_meta_precision 1 "^mixprec eval: $in/fp8.safetensors: metadata 'mixprec.precision' = 'fp8': not a precision" -- \
  eval --checkpoint "$in/fp8.safetensors" "${syn[@]}"
# the classes are the checkpoint's, not the data's: labels beyond them are refused, fewer are fine
row eval_labels_beyond 1 "label 2 of sample [0-9]+ is outside the 2 classes of the checkpoint $in/c2.safetensors \(its tensor 'fc2.weight' has 2 rows\)$" -- \
  eval --checkpoint "$in/c2.safetensors" --data "$(np x40.npy y40_4.npy)"
out=$("$bin" eval --checkpoint "$in/c4.safetensors" --data "$(np x40.npy y40_2.npy)" 2>&1)
grep -Eq "^eval: 4 samples, loss [0-9.]+, accuracy [0-9.]+% \(fp32, cpu\)$" <<<"$out" && pass=$((pass + 1)) \
  || { fail=$((fail + 1)); echo "FAIL: eval of a 4-class checkpoint on labels 0-1: $out"; }
# export of a checkpoint of the model it names, for other classes or inputs: the hint names those options
row export_classes 1 "c4.safetensors: tensor 'fc2.weight' has shape 4x128, .*: give the --input-shape \(here 1x4x4\) and --classes \(here 10\) model small was trained with$" -- \
  export --checkpoint "$in/c4.safetensors" --input-shape 1x4x4 --classes 10 -o "$work/c/c4.onnx"
# without --classes the checkpoint's are taken (its logits layer's rows), not the default 10
out=$("$bin" export --checkpoint "$in/c4.safetensors" --input-shape 1x4x4 -o "$work/c/c4_own.onnx" 2>&1)
grep -q "(1x4x4 -> 4 classes, " <<<"$out" && [ -s "$work/c/c4_own.onnx" ] && pass=$((pass + 1)) \
  || { fail=$((fail + 1)); echo "FAIL: export takes the checkpoint's classes: $out"; }
row export_model 1 "\(the checkpoint was saved for model 'small', this model is 'cnn10'\): give --model the model" -- \
  export --checkpoint "$in/c4.safetensors" --model cnn10 --input-shape 1x4x4 --classes 4 -o "$work/c/c4.onnx"
# a good eval: one line, the accuracy train would print
out=$("$bin" eval --checkpoint "$ck" "${syn[@]}" 2>&1)
grep -Eq "^eval: 20 samples, loss [0-9.]+, accuracy [0-9.]+% \(fp32, cpu\)$" <<<"$out" && pass=$((pass + 1)) \
  || { fail=$((fail + 1)); echo "FAIL: eval line: $out"; }
"$bin" eval --help | grep -q -- "--checkpoint FILE" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: eval --help"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
