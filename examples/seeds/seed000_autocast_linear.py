# Seed 000 (Lightning Thunder: torch.autocast around prims.linear): the final trace Thunder prints
# when autocast handles prims.linear, with both inputs converted to bf16 in a fusion region and a bf16
# linear. Recorded for cuda:0; run on the CPU with:
#   thunder run examples/seeds/seed000_autocast_linear.py --random-inputs 0 --device cpu

def computation(x, w):
  # x: "cuda:0 f32[16, 16]"
  # w: "cuda:0 f32[16, 16]"
  [t0, t1] = nvFusion0(w, x)
    # t0 = prims.convert_element_type(x, dtypes.bfloat16)  # t0: "cuda:0 bf16[16, 16]"
    # t1 = prims.convert_element_type(w, dtypes.bfloat16)  # t1: "cuda:0 bf16[16, 16]"
  del w, x
  t2 = torch.nn.functional.linear(t0, t1, None)  # t2: "cuda:0 bf16[16, 16]"
    # t2 = ltorch.linear(t0, t1, None)  # t2: "cuda:0 bf16[16, 16]"
      # t2 = prims.linear(t0, t1, None)  # t2: "cuda:0 bf16[16, 16]"
  del t0, t1
  return t2
