from setuptools import setup

setup(name="vllm")
