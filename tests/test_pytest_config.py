"""pytest.ini filters only the dependency warnings it names, by module and category."""

import re
import warnings

GAST_MESSAGE = ("Attribute.__init__ got an unexpected keyword argument '___pyct_anno'. "
                "Support for arbitrary keyword arguments is deprecated")


def action_for(category, message: str, module: str) -> str:
  """The action of the first filter that matches, as `warnings` picks it (no line number)."""
  for action, msg, cat, mod, lineno in warnings.filters:
    if ((msg is None or msg.match(message)) and issubclass(category, cat) and
        (mod is None or mod.match(module)) and lineno == 0):
      return action
  return warnings.defaultaction


def test_gast_deprecation_flood_is_filtered():
  assert action_for(DeprecationWarning, GAST_MESSAGE, "gast.astn") == "ignore"


def test_our_warnings_and_other_categories_stay_visible():
  for module in ("t2t_keras.layers.dense", "data_gen.problem", "tests.test_x", "keras.src"):
    assert action_for(DeprecationWarning, GAST_MESSAGE, module) != "ignore", module
    assert action_for(UserWarning, "anything", module) != "ignore", module
  assert action_for(UserWarning, GAST_MESSAGE, "gast.astn") != "ignore"


def test_every_ignore_names_a_module_and_a_category(request):
  lines = request.config.getini("filterwarnings")
  assert lines, "pytest.ini's filterwarnings were not read"
  for line in lines:
    action, _, category, module = (line.split(":", 4) + [""] * 4)[:4]
    if action == "ignore":
      assert category.endswith("Warning") and category != "Warning", line
      assert module.strip() and not re.fullmatch(r"[.*]*", module.strip()), line
