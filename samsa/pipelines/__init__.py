"""Pipelines on Spark."""
