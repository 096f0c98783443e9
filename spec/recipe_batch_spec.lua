-- recipe_batch_spec.lua: the recipe's global batch (lua/lwopt/app/recipe_batch.lua): --global-batch
-- into --accum, and the --accum a resume takes to keep a checkpoint's global batch.
local batch = require("lwopt.app.recipe_batch")

local function flags(t)
   t.tp = t.tp or 1
   return t
end

describe("lwopt.recipe_batch", function()
   it("sets --accum from --global-batch, 1 without either", function()
      local v = flags({ batch = 4, global_batch = 24 })
      assert.is_nil(batch.plan(v, 2))
      assert.same({ 3, true }, { v.accum, v.accum_given })
      v = flags({ batch = 4 })
      assert.is_nil(batch.plan(v, 2))
      assert.same({ 1, false }, { v.accum, v.accum_given })
      assert.equal(8, batch.global(v, 2))
   end)

   it("refuses a global batch the ranks cannot split, or one that --accum contradicts", function()
      assert.equal("--global-batch 20 is not a multiple of --batch 4 x 2 ranks (8): a step's "
         .. "sequences split evenly over the ranks and micro-steps",
         batch.plan(flags({ batch = 4, global_batch = 20 }), 2))
      assert.equal("--global-batch 16 with --batch 4 on 2 data-parallel ranks (tp 2) is --accum "
         .. "2, not --accum 3 (give one of the two)",
         batch.plan(flags({ batch = 4, global_batch = 16, accum = 3, tp = 2 }), 2))
   end)

   it("reads a checkpoint's global batch, or works it out from batch, accum, ranks and tp",
      function()
      assert.equal(12, batch.saved({ global_batch = 12, batch = 1, accum = 1, ranks = 1 }))
      assert.equal(12, batch.saved({ batch = 2, accum = 3, ranks = 4, tp = 2 }))
      assert.is_nil(batch.saved({}))
   end)

   it("keeps the checkpoint's global batch with another --accum, or says why it cannot",
      function()
      local saved = { batch = 8, accum = 1, ranks = 2, global_batch = 16 }
      local v = flags({ batch = 8, accum = 1, accum_given = false })
      assert.same({ 2, "--accum 2 (was 1) keeps the checkpoint's global batch of 16 sequences at "
         .. "1 rank" }, { batch.keep(saved, v, 1, "ck/step-2") })
      assert.same({ 1 }, { batch.keep(saved, v, 2, "ck/step-2") }) -- kept as it is
      v.accum_given = true -- --accum or --global-batch: the user's choice stands
      assert.same({ 1 }, { batch.keep(saved, v, 1, "ck/step-2") })
      v.accum_given = false
      assert.has_error(function() batch.keep(saved, v, 3, "ck/step-2") end, "--resume: ck/step-2 "
         .. "was trained with a global batch of 16 sequences, which --batch 8 on 3 ranks cannot "
         .. "keep (16 is not a multiple of 24): give --batch and --accum that make it, or a new "
         .. "one with --global-batch")
   end)
end)
