-- flags_spec.lua: the command-line flag parser shared by bin/lwopt and recipes.
local flags = require("lwopt.flags")

local list = {
   { "dp", "int", 1, "ranks" },
   { "bucket-size", "size", nil, "elements" },
   { "lr", "number", 0.1, "learning rate" },
   { "algorithm", { "cost", "lpt" }, "cost", "layout" },
   { "json", "bool", false, "JSON" },
   { "name", "string", nil, "a name" },
}

describe("lw.flags.parse", function()
   it("fills defaults and reads both --flag value and --flag=value", function()
      local v, positional = flags.parse({ "--dp", "4", "--bucket-size=40M", "file", "--json" }, list)
      assert.same({ dp = 4, bucket_size = 40e6, lr = 0.1, algorithm = "cost", json = true },
         v)
      assert.same({ "file" }, positional)
   end)

   it("converts sizes with K, M and G suffixes", function()
      assert.equal(2000, flags.parse({ "--bucket-size", "2K" }, list).bucket_size)
      assert.equal(3e9, flags.parse({ "--bucket-size", "3G" }, list).bucket_size)
   end)

   it("names every mistake", function()
      local cases = {
         { { "--nope" }, "unknown flag --nope" },
         { { "--dp" }, "--dp needs a value" },
         { { "--dp", "x" }, "--dp expects an integer, got 'x'" },
         { { "--dp", "4M" }, "--dp expects an integer, got '4M'" },
         { { "--bucket-size", "4T" }, "--bucket-size expects an element count such as 40M, got '4T'" },
         { { "--lr", "fast" }, "--lr expects a number, got 'fast'" },
         { { "--algorithm", "greedy" }, "--algorithm must be one of cost|lpt, got 'greedy'" },
         { { "--json=yes" }, "--json takes no value" },
      }
      for _, c in ipairs(cases) do
         local v, err = flags.parse(c[1], list)
         assert.is_nil(v)
         assert.equal(c[2], err)
      end
   end)

   it("prints a usage line per flag with its default", function()
      local text = flags.usage(list)
      assert.matches("%-%-dp INT%s+ranks %(default 1%)", text)
      assert.matches("%-%-algorithm {cost|lpt}", text)
   end)
end)
