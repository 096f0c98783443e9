-- recipe_presets.lua: require("lwopt.app.recipe_presets") for code written before the presets
-- moved into the library (trained.lua uses them too): the same table as
-- require("lwopt.presets").
return require("lwopt.presets")
