"""An OpenAI-compatible HTTP server over an in-process engine (``memrl serve``)."""
