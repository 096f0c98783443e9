-- gpt_recipe.lua: require("lwopt.gpt_recipe") for recipes written before the application had
-- a folder of its own: the same table as require("lwopt.app.recipe").
return require("lwopt.app.recipe")
