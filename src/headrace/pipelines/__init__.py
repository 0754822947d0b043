"""Concrete pipelines built on headrace (fraud detection first), each with its data generator."""
