"""The ``dsh-orchestra`` command: thin, it only parses arguments and calls the layers.

``load_recipe(path)`` is what ``dsh-orchestra run`` loads a recipe with (a ``Recipe``; also in
``dsh_orchestra.workflow``).
"""

from .._public import publish as _publish
from ..workflow import Recipe as Recipe, RecipeError as RecipeError, load_recipe as load_recipe
from ._main import main as main

__all__ = _publish(globals())
